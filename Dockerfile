# lockwatch in a container: /metrics on 10057, as a non-root user, on a
# read-only root filesystem. The config and the credentials are mounted files:
#
#   docker build -t lockwatch .
#   docker run --read-only -p 10057:10057 \
#     -v /etc/lockwatch:/etc/lockwatch:ro -v lockwatch-state:/var/lib/lockwatch lockwatch
#
# BASE is any image with Python 3.11+ and pip (the tests build on one made from
# Debian packages, as they cannot pull images).
ARG BASE=python:3.11-slim-bookworm

# Each stage installs what pyproject.toml declares in a layer of its own,
# before the source is copied: a rebuild after a change to the source alone
# reuses those layers and builds and installs only lockwatch itself.
FROM ${BASE} AS build
WORKDIR /src
COPY pyproject.toml ./
RUN python -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['build-system']['requires'], sep='\n')" >/tmp/build-requires.txt \
    && python -m pip install --no-cache-dir --disable-pip-version-check build -r /tmp/build-requires.txt
COPY . .
RUN python -m build --no-isolation --wheel --outdir /dist .

FROM ${BASE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY pyproject.toml /tmp/
RUN python -c "import tomllib; print(*tomllib.load(open('/tmp/pyproject.toml', 'rb'))['project']['dependencies'], sep='\n')" >/tmp/requires.txt \
    && python -m pip install -r /tmp/requires.txt \
    && rm /tmp/pyproject.toml /tmp/requires.txt
COPY --from=build /dist/ /tmp/dist/
RUN python -m pip install /tmp/dist/*.whl \
    && rm -rf /tmp/dist \
    && useradd --system --uid 10057 --user-group --no-create-home \
        --home-dir /var/lib/lockwatch --shell /usr/sbin/nologin lockwatch \
    && install -d -o lockwatch -g lockwatch -m 0750 /var/lib/lockwatch \
    && install -d -m 0755 /etc/lockwatch

# Nothing below writes outside /var/lib/lockwatch (a volume): the root
# filesystem can be mounted read-only.
USER 10057:10057
WORKDIR /var/lib/lockwatch
VOLUME ["/var/lib/lockwatch"]
EXPOSE 10057
# 200 while polls progress, 503 once the poll loop stalls (see /healthz). With
# TLS or basic auth in a web-config file, probe from outside instead.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:10057/healthz', timeout=4).status != 200)"]
ENTRYPOINT ["lockwatch", "run"]
CMD ["--config.file=/etc/lockwatch/lockwatch.yml", \
     "--web.listen-address=:10057", \
     "--state-dir=/var/lib/lockwatch", \
     "--log.format=logfmt"]

"""The ``Dockerfile`` builds an image that runs lockwatch as a non-root user,
writes nothing outside its state volume (so a read-only root filesystem suits
it), serves ``/metrics`` and passes its own healthcheck.

Public base images cannot be pulled here, so the image is built on a base made
from Debian packages (debootstrap, plus this machine's CA certificates), with
buildah and chroot isolation; that needs root. The container is run with
``buildah run``: this machine's sandbox refuses the ``setrlimit`` an OCI
runtime (crun, runc) makes, so ``podman run --read-only`` cannot start here.
What the writable layer holds afterwards stands in for the read-only check."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests
from dockerfile_parse import DockerfileParser

from tests.fixtures.paths import ROOT
from tests.fixtures.postgres import PgDatabase, free_port, wait_until

BASE = "localhost/lockwatch-test-base"
IMAGE = "localhost/lockwatch-test"
# What the Dockerfile needs of a base: python, pip, and useradd.
BASE_PACKAGES = "python3,python3-pip,python-is-python3,passwd,ca-certificates"
# Mount points buildah's chroot isolation makes in the writable layer itself.
BUILDAH_OWN = {"run", "etc", "etc/hosts", "etc/resolv.conf", "etc/hostname", "proc", "sys", "dev"}


def instruction(name: str) -> str:
    dockerfile = DockerfileParser(str(ROOT / "Dockerfile"))
    (value,) = [i["value"] for i in dockerfile.structure if i["instruction"] == name]
    return str(value)


def test_the_dockerfile_runs_lockwatch_as_a_non_root_user_checked_on_healthz() -> None:
    user, _, group = instruction("USER").partition(":")
    assert int(user) != 0 and int(group) != 0
    assert instruction("EXPOSE") == "10057"
    assert instruction("VOLUME") == '["/var/lib/lockwatch"]'
    assert json.loads(instruction("ENTRYPOINT")) == ["lockwatch", "run"]
    cmd = json.loads(instruction("CMD"))
    assert "--web.listen-address=:10057" in cmd and "--state-dir=/var/lib/lockwatch" in cmd
    assert "--config.file=/etc/lockwatch/lockwatch.yml" in cmd
    healthcheck = instruction("HEALTHCHECK")
    assert "http://127.0.0.1:10057/healthz" in healthcheck


def _pattern(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern as Docker matches it (Go's filepath.Match, with ``**``)."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def build_context(root: Path) -> dict[str, int]:
    """The files a ``docker build`` of ``root`` sends, with their sizes: a path
    is left out when the last pattern that matches it, or a directory above it,
    is not a ``!`` one."""
    lines = (root / ".dockerignore").read_text().splitlines()
    rules = [
        (line.startswith("!"), _pattern(line.removeprefix("!").strip("/")))
        for line in (raw.strip() for raw in lines)
        if line and not line.startswith("#")
    ]

    def excluded(path: str) -> bool:
        parts = path.split("/")
        ancestors = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        verdict = False
        for negated, rule in rules:
            if any(rule.fullmatch(a) for a in ancestors):
                verdict = not negated
        return verdict

    reincluded = [rule.pattern for negated, rule in rules if negated]
    sent: dict[str, int] = {}
    for directory, dirs, files in os.walk(root):
        here = Path(directory).relative_to(root).as_posix()
        prefix = "" if here == "." else here + "/"
        # A directory left out with nothing re-included below it is not walked.
        dirs[:] = [
            d
            for d in dirs
            if not excluded(prefix + d)
            or any(p.startswith(re.escape(prefix + d)) for p in reincluded)
        ]
        for name in files:
            if not excluded(prefix + name) and not os.path.islink(Path(directory, name)):
                sent[prefix + name] = Path(directory, name).stat().st_size
    return sent


def test_the_build_context_is_what_the_wheel_is_built_from_without_test_dependencies(
    tmp_path: Path,
) -> None:
    """The issue's 317 MB: a checkout's test dependencies went into the context."""
    context = build_context(ROOT)
    needed = {"pyproject.toml", "setup.py", "README.md", "LICENSE", "lockwatch/__init__.py"}
    needed |= {"alerts/lockwatch.rules.yml", "systemd/lockwatch.service"}
    needed |= {"docs/lockwatch.example.yml", "docs/runbooks.md", "grafana/lockwatch.json"}
    assert needed <= set(context)
    heavy = (".venv", ".pg", ".js", ".npm-libraries", "node_modules", ".git", "tests", "bench")
    assert [p for p in context if p.split("/")[0] in heavy or "/node_modules/" in p] == []
    assert [
        p for p in context if "__pycache__" in p or (p.startswith("docs/") and p.endswith(".png"))
    ] == []
    assert sum(context.values()) < 5_000_000, f"{sum(context.values())} bytes"
    # Whatever a checkout gathers at its top level later stays out too.
    (tmp_path / ".dockerignore").write_bytes((ROOT / ".dockerignore").read_bytes())
    for junk in (".venv/lib/x.py", "node_modules/pg/index.js", "lockwatch/__pycache__/a.pyc"):
        (tmp_path / junk).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / junk).write_text("x")
    (tmp_path / "lockwatch" / "cli.py").write_text("x")
    assert set(build_context(tmp_path)) == {"lockwatch/cli.py"}


def buildah(*args: str, timeout: float = 900) -> str:
    result = subprocess.run(
        ["buildah", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, f"buildah {shlex.join(args)}:\n{result.stdout}{result.stderr}"
    return result.stdout.strip()


def build_base() -> None:
    """A Python base from Debian packages, trusting what this machine trusts:
    debootstrapped straight into a working container's root, which is then
    committed (copying a debootstrapped directory into it took 4 s of CPU,
    two thirds of what the commit takes)."""
    ctr = buildah("from", "scratch")
    try:
        rootfs = Path(buildah("mount", ctr))
        try:
            subprocess.run(
                [
                    "debootstrap",
                    "--variant=minbase",
                    f"--include={BASE_PACKAGES}",
                    "bookworm",
                    rootfs,
                ],
                capture_output=True,
                timeout=900,
                check=True,
            )
            shutil.copy("/etc/ssl/certs/ca-certificates.crt", rootfs / "etc/ssl/certs/")
        finally:
            unmount_under(rootfs)
            subprocess.run(["buildah", "umount", ctr], capture_output=True, check=False)
        buildah("config", "--env", "PIP_BREAK_SYSTEM_PACKAGES=1", ctr)
        buildah("config", "--env", "PIP_CERT=/etc/ssl/certs/ca-certificates.crt", ctr)
        buildah("commit", "--rm", ctr, BASE)
    finally:
        subprocess.run(["buildah", "rm", ctr], capture_output=True, check=False)


def unmount_under(root: Path) -> None:
    """What a debootstrap stopped midway (by the test's timeout) leaves mounted
    in its target, its /proc: unmounted, deepest first, so that removing the
    target never walks into the host's mounts."""
    mounted = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for point in sorted((m for m in mounted if m.startswith(f"{root}/")), reverse=True):
        subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)


@pytest.fixture(scope="module")
def image() -> str:
    missing = [tool for tool in ("buildah", "debootstrap") if shutil.which(tool) is None]
    reason = None
    if os.geteuid() != 0:
        reason = "building the image needs root (buildah with chroot isolation, debootstrap)"
    elif missing:
        reason = f"{' and '.join(missing)} missing: run scripts/bootstrap as root"
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    if subprocess.run(["buildah", "inspect", BASE], capture_output=True, check=False).returncode:
        build_base()
    buildah(
        "bud", "--isolation", "chroot", "--format", "docker", "--layers",
        "--build-arg", f"BASE={BASE}", "-t", IMAGE, str(ROOT),
    )  # fmt: skip
    return IMAGE


@pytest.fixture
def containers(image: str) -> Iterator[tuple[str, str]]:
    """One container for the daemon, one for the probes: buildah runs in one
    container share its mounts, so a probe would hide the daemon's volume."""
    made = (buildah("from", image), buildah("from", image))
    yield made
    for ctr in made:
        subprocess.run(["buildah", "rm", ctr], capture_output=True, check=False)


def daemon_pids(port: int) -> list[int]:
    """The lockwatch process run inside the container, found by its unique address."""
    wanted = f"--web.listen-address=127.0.0.1:{port}"
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if proc.name.isdigit() and wanted.encode() in argv and b"buildah" not in argv[0]:
            pids.append(int(proc.name))
    return pids


def image_config(image: str) -> dict[str, Any]:
    config: dict[str, Any] = json.loads(buildah("inspect", "--type", "image", image))
    return config["Docker"]["config"]  # type: ignore[no-any-return]


@pytest.mark.slow
@pytest.mark.pg
# Its setup builds the image, and on a machine that has never built it, its
# base too (debootstrap): 300 s was not enough for both on a busy machine.
@pytest.mark.timeout(900)
@pytest.mark.parametrize("pg_server", ["pg18"], indirect=True)
def test_the_image_serves_metrics_as_its_user_and_writes_only_its_state(
    image: str, containers: tuple[str, str], pg: PgDatabase, tmp_path: Path
) -> None:
    container, prober = containers
    # A lock held, so lockwatch has a hold time to save in its state volume.
    pg.connect("app").execute("SELECT pg_advisory_lock(5)")
    config = tmp_path / "etc"
    config.mkdir(mode=0o755)
    (config / "orders-dsn").write_text(pg.monitor_dsn + "\n")
    (config / "lockwatch.yml").write_text(
        "targets:\n  - name: orders\n    dsn_file: /etc/lockwatch/orders-dsn\n    interval: 1s\n"
    )
    settings = image_config(image)
    port = free_port()
    # The image's own command, but on a loopback port: the tests listen nowhere else.
    cmd = [
        f"--web.listen-address=127.0.0.1:{port}" if arg.startswith("--web.listen-address") else arg
        for arg in settings["Cmd"]
    ]
    run = ["buildah", "run", "--isolation", "chroot", "--network", "host"]
    # The state goes to the volume buildah makes for the image's VOLUME (a bind
    # mount on the same path loses to it), the config comes mounted read-only.
    mounts = ["-v", f"{config}:/etc/lockwatch:ro"]
    log = tmp_path / "lockwatch.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*run, *mounts, container, "--", *settings["Entrypoint"], *cmd],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    base = f"http://127.0.0.1:{port}"
    try:

        def healthy() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"exited with {proc.returncode}:\n{log.read_text()}")
            try:
                return requests.get(f"{base}/healthz", timeout=2).status_code == 200
            except requests.ConnectionError:
                return False

        wait_until(healthy, timeout=60, message="the container's /healthz")
        wait_until(lambda: "first poll ok: 1 locks" in log.read_text(), message="a first poll")
        metrics = requests.get(f"{base}/metrics", timeout=5).text
        assert 'lockwatch_up{target="orders"} 1.0' in metrics
        assert "process_resident_memory_bytes" in metrics
        assert log.read_text().startswith("ts="), "logfmt, as the image's command says"

        check = settings["Healthcheck"]["Test"]
        assert check[0] == "CMD"
        probe = [arg.replace(":10057/", f":{port}/") for arg in check[1:]]
        assert subprocess.run([*run, prober, "--", *probe], check=False, timeout=60).returncode == 0
        # The wheel built from the (allowlisted) context carries the example config.
        example = subprocess.run(
            [*run, prober, "--", "lockwatch", "export", "config"],
            capture_output=True,
            check=False,
            timeout=60,
        )
        assert example.stdout == (ROOT / "docs" / "lockwatch.example.yml").read_bytes()
        # The daemon's own process, seen from the host: the user it really runs as.
        (pid,) = daemon_pids(port)
        user = str(psutil.Process(pid).uids().real)
        assert user == settings["User"].split(":")[0] != "0"
        volume = Path(f"/proc/{pid}/root/var/lib/lockwatch")
        saved = wait_until(lambda: list(volume.glob("target-orders.json")), message="state saved")
        assert all(p.stat().st_uid == int(user) for p in saved)
    finally:
        # buildah run kills its command rather than passing SIGTERM on; a container
        # runtime signals lockwatch itself, as this does.
        for pid in daemon_pids(port):
            os.kill(pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
    assert "lockwatch stopped" in log.read_text(), log.read_text()
    mounted = Path(buildah("mount", container))
    try:
        written = {
            str(p.relative_to(mounted.parent / "diff"))
            for p in (mounted.parent / "diff").rglob("*")
        }
    finally:
        buildah("umount", container)
    assert written <= BUILDAH_OWN, (
        f"written outside the state volume: {sorted(written - BUILDAH_OWN)}"
    )

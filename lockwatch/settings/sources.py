"""The settings of service discovery: ``target_sources:`` (a Prometheus file_sd
file or http_sd endpoint each) and ``auth_modules:`` (named credential
profiles, like postgres_exporter's, that discovered targets log in with).
:mod:`lockwatch.settings.discovery` makes targets from them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated

from lockwatch.settings.fields import (
    UNIQUE,
    FilePath,
    Interval,
    Name,
    PositiveSeconds,
    Seconds,
    Secret,
    Section,
    Text,
    check,
    check_dsn,
)
from lockwatch.settings.queues import HttpUrl, UrlSecret

# Keys an auth module's options may not set: the address and the module's own
# fields do, and a password only comes from ``password``.
_SET_ELSEWHERE = frozenset({"host", "hostaddr", "port", "user", "password", "dbname", "sslmode"})
FILE_REFRESH = 5.0  # seconds between looks at a file_sd file
HTTP_REFRESH = 60.0  # Prometheus' default refresh_interval for http_sd


def _check_options(options: Mapping[str, str]) -> str | None:
    taken = sorted(_SET_ELSEWHERE.intersection(options))
    if taken:
        return f"may not set {', '.join(taken)}: the auth module's own keys and the address do"
    import psycopg.conninfo  # here: settings/fields.py check_dsn says why

    try:
        dsn = psycopg.conninfo.make_conninfo("", **options)
    except psycopg.ProgrammingError:
        return "holds a key libpq does not know"
    problem = check_dsn(dsn)
    return None if problem is None else f"as connection options, {problem}"


def _check_sslmode(mode: str) -> str | None:
    return check_dsn(f"sslmode={mode}")


@dataclass(frozen=True, slots=True)
class AuthModule(Section):
    """How lockwatch logs in to a discovered server (postgres_exporter's auth_modules)."""

    name: Annotated[Name, UNIQUE]
    user: Text
    # only from password_file or ${VAR}: never written in the config itself
    password: Annotated[Text | None, Secret(literal=False)] = field(default=None, repr=False)
    sslmode: Annotated[Text, check(_check_sslmode)] = "prefer"
    dbname: Text = "postgres"  # the database a target without a database label reads
    options: Annotated[dict[str, Text], check(_check_options)] = field(default_factory=dict)

    def dsn(self, host: str, port: int, dbname: str | None) -> str:
        import psycopg.conninfo  # here: settings/fields.py check_dsn says why

        return psycopg.conninfo.make_conninfo(
            "",
            host=host,
            port=str(port),
            dbname=dbname or self.dbname,
            user=self.user,
            password=self.password,
            sslmode=self.sslmode,
            **self.options,
        )


@dataclass(frozen=True, slots=True)
class TargetSource(Section):
    """A file_sd file or an http_sd endpoint (exactly one of ``file`` and ``url``)."""

    name: Annotated[Name, UNIQUE]
    auth_module: Name  # the profile its targets log in with, unless a label names another
    file: FilePath | None = None
    # may carry basic-auth credentials: never shown
    url: Annotated[HttpUrl | None, UrlSecret] = field(default=None, repr=False)
    refresh_interval: Interval | None = None  # default: 5s for a file, 60s for a URL
    timeout: PositiveSeconds = 10.0  # the whole of one http_sd request, body included
    # how long a target gone from the list keeps its hold times, findings and
    # incidents (unresolved), in case it comes back
    keep_vanished: Seconds = 3600.0

    @property
    def kind(self) -> str:
        return "file" if self.file is not None else "http"

    @property
    def every(self) -> float:
        if self.refresh_interval is not None:
            return self.refresh_interval
        return FILE_REFRESH if self.file is not None else HTTP_REFRESH

"""The whole configuration and each target in it, as frozen values."""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import Field

from lockwatch.settings.actions import ActionSettings
from lockwatch.settings.fields import (
    INHERITED,
    INTERNAL,
    UNIQUE,
    Dsn,
    FilePath,
    Flag,
    Interval,
    Name,
    PositiveSeconds,
    Secret,
    Section,
    Text,
    check,
)
from lockwatch.settings.incidents import IncidentSettings
from lockwatch.settings.jobs import JobSpec, PingSettings
from lockwatch.settings.locks import LockSettings
from lockwatch.settings.notify import NotifySettings
from lockwatch.settings.pooler import PoolerSpec
from lockwatch.settings.queues import Queue, WorkerGroup
from lockwatch.settings.serverless import SleepSettings
from lockwatch.settings.sharding import ALL, Shard, check_shard, parse_shard
from lockwatch.settings.sources import AuthModule, TargetSource
from lockwatch.settings.web import DEFAULT_LISTEN, WebConfig

_HOSTNAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?")


_LISTEN_EXAMPLE = "(e.g. 127.0.0.1:10057 or [::1]:10057)"


def parse_listen(listen: str) -> tuple[str, int]:
    """``host:port`` with IPv6 hosts in brackets; port 0 picks a free port.

    >>> parse_listen("127.0.0.1:10057"), parse_listen("[::1]:0")
    (('127.0.0.1', 10057), ('::1', 0))
    >>> parse_listen("::1:80")
    Traceback (most recent call last):
    ...
    ValueError: IPv6 addresses go in brackets: '::1:80' (e.g. 127.0.0.1:10057 or [::1]:10057)
    """
    host, colon, port = listen.rpartition(":")
    if not colon or not host:
        raise ValueError(f"not host:port: {listen!r} {_LISTEN_EXAMPLE}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"not an IPv6 address in brackets: [{host}]") from None
    elif ":" in host:
        raise ValueError(f"IPv6 addresses go in brackets: {listen!r} {_LISTEN_EXAMPLE}")
    elif not _HOSTNAME.fullmatch(host):
        raise ValueError(f"not a host name or address: {host!r}")
    if not port.isdigit() or int(port) > 65535:
        raise ValueError(f"port must be a number from 0 to 65535, got {port!r}")
    return host, int(port)


def check_external_url(url: str) -> str | None:
    """
    >>> check_external_url("https://lockwatch.example/lw/") is None
    True
    >>> check_external_url("lockwatch.example:10057")
    'not an http:// or https:// URL with a host, and without a ?query or #fragment'
    """
    parts = urlsplit(url)
    if parts.scheme in ("http", "https") and parts.hostname and not parts.query + parts.fragment:
        return None
    return "not an http:// or https:// URL with a host, and without a ?query or #fragment"


def listen_url(listen: str, scheme: str = "http") -> str:
    """Where lockwatch listening on ``listen`` is reached when no external URL
    is given: its address, or this host's name for every interface (as
    Prometheus and Alertmanager derive theirs).

    >>> listen_url("127.0.0.1:10057"), listen_url("[::1]:80", "https")
    ('http://127.0.0.1:10057', 'https://[::1]:80')
    """
    host, port = parse_listen(listen)
    if host in ("", "0.0.0.0", "::"):  # noqa: S104 (read, not bound)
        host = socket.gethostname()
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"


def check_listen(listen: str) -> str | None:
    """
    >>> check_listen("[::1]:10057") is None, check_listen("0.0.0.0:80") is None
    (True, True)
    >>> check_listen("localhost")
    "not host:port: 'localhost' (e.g. 127.0.0.1:10057 or [::1]:10057)"
    """
    try:
        _, port = parse_listen(listen)
    except ValueError as exc:
        return str(exc)
    # Port 0 (any free port) suits tests, not a daemon Prometheus must find.
    return "port must be a number from 1 to 65535, got '0'" if port == 0 else None


def _check_directory(path: Path) -> str | None:
    return f"not a directory: {path}" if path.exists() and not path.is_dir() else None


@dataclass(frozen=True, slots=True)
class Target(Section):
    name: Annotated[Name, UNIQUE]
    # may hold a password: never log or show it
    dsn: Annotated[Dsn, Secret()] = field(repr=False)
    interval: Annotated[Interval, INHERITED] = 10.0
    connect_timeout: Annotated[PositiveSeconds, INHERITED] = 5.0
    statement_timeout: Annotated[PositiveSeconds, INHERITED] = 5.0
    locks: Annotated[LockSettings, INHERITED] = field(default_factory=LockSettings)
    queues: tuple[Queue, ...] = ()
    workers: tuple[WorkerGroup, ...] = ()
    pgbouncer: PoolerSpec | None = None  # the pooler in front of this server, if any
    # A compute that suspends when idle: lockwatch lets it sleep (``sleep``).
    serverless: Flag = False
    sleep: SleepSettings = field(default_factory=SleepSettings)
    # what lockwatch terminate connects with (defaults: may set it for every target)
    actions: Annotated[ActionSettings, INHERITED] = field(default_factory=ActionSettings)
    # the target source it was discovered by (None: from targets:) and its labels
    discovered: Annotated[Text | None, INTERNAL] = None
    labels: Annotated[tuple[tuple[str, str], ...], INTERNAL] = ()

    @property
    def instance(self) -> str:
        """The PostgreSQL server the target reads, as host:port: what sharding
        splits on, so that all the databases of one server go to one shard."""
        import psycopg.conninfo  # here: settings/fields.py check_dsn says why

        try:
            parts = psycopg.conninfo.conninfo_to_dict(self.dsn)
        except psycopg.ProgrammingError:
            return self.name
        host = str(parts.get("host") or "localhost")
        host = f"[{host}]" if ":" in host and "," not in host else host
        return f"{host}:{parts.get('port') or 5432}"

    @property
    def longest_gap(self) -> float:
        """The longest lockwatch waits between two polls of the target."""
        return max(self.interval, self.sleep.interval) if self.serverless else self.interval


@dataclass(frozen=True, slots=True)
class Settings(Section):
    # at least one, unless target_sources discover them (the loader checks)
    targets: tuple[Target, ...] = ()
    target_sources: tuple[TargetSource, ...] = ()
    auth_modules: tuple[AuthModule, ...] = ()
    # "i/n": this instance watches the n-th part of the targets; --shard overrides
    shard: Annotated[Text | None, check(check_shard)] = None
    # this instance's name among the replicas of its shard (--replica overrides);
    # with notify channels, the replicas elect one sender (docs/fleet.md)
    replica: Name | None = None
    # what defaults: sets for every target, by field name: discovered ones get it too
    target_defaults: Annotated[tuple[tuple[str, object], ...], INTERNAL] = ()
    listen: Annotated[Text, check(check_listen)] = DEFAULT_LISTEN
    state_dir: Annotated[FilePath | None, check(_check_directory)] = None
    # the config file, when there is one
    source: Annotated[Path | None, INTERNAL] = None
    notify: NotifySettings = field(default_factory=NotifySettings)
    jobs: tuple[JobSpec, ...] = ()
    pings: PingSettings = field(default_factory=PingSettings)
    incidents: IncidentSettings = field(default_factory=IncidentSettings)
    # TLS and basic auth for the HTTP endpoint
    web: Annotated[WebConfig | None, Field(alias="web_config")] = None
    # Where people and Prometheus reach lockwatch (--web.external-url), for the
    # links in alerts, messages and logs; None: its listen address
    external_url: Annotated[Text | None, check(check_external_url)] = None

    @property
    def web_url(self) -> str:
        """lockwatch's own URL, without a trailing slash: what links point at."""
        scheme = self.web.scheme if self.web is not None else "http"
        return (self.external_url or listen_url(self.listen, scheme)).rstrip("/")

    @property
    def runbooks(self) -> str:
        """The base of every runbook link: ``incidents.runbook_base_url``, else
        the runbooks lockwatch serves itself, ``/runbooks``."""
        return self.incidents.runbook_base_url or f"{self.web_url}/runbooks"

    @property
    def sharding(self) -> Shard:
        return ALL if self.shard is None else parse_shard(self.shard)

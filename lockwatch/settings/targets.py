"""The whole configuration and each target in it, as frozen values."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path

from lockwatch.settings.jobs import JobSpec, PingSettings
from lockwatch.settings.locks import LockSettings
from lockwatch.settings.notify import NotifySettings
from lockwatch.settings.pooler import PoolerSpec
from lockwatch.settings.queues import Queue, WorkerGroup
from lockwatch.settings.web import WebConfig

DEFAULT_LISTEN = "127.0.0.1:10057"


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


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    dsn: str = field(repr=False)  # may hold a password: never log or show it
    interval: float = 10.0
    connect_timeout: float = 5.0
    statement_timeout: float = 5.0
    locks: LockSettings = field(default_factory=LockSettings)
    queues: tuple[Queue, ...] = ()
    workers: tuple[WorkerGroup, ...] = ()
    pgbouncer: PoolerSpec | None = None  # the pooler in front of this server, if any


@dataclass(frozen=True, slots=True)
class Settings:
    targets: tuple[Target, ...]
    listen: str = DEFAULT_LISTEN
    state_dir: Path | None = None
    source: Path | None = None  # the config file, when there is one
    notify: NotifySettings = field(default_factory=NotifySettings)
    jobs: tuple[JobSpec, ...] = ()
    pings: PingSettings = field(default_factory=PingSettings)
    web: WebConfig | None = None  # TLS and basic auth for the HTTP endpoint

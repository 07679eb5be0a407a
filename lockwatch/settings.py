"""Validated configuration as frozen values. ``config.py`` builds these from YAML
or from command-line flags; everything else only reads them."""

from __future__ import annotations

import enum
import fnmatch
import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path

from lockwatch.model import LockKey
from lockwatch.notify.settings import NotifySettings
from lockwatch.queue_settings import Queue, WorkerGroup
from lockwatch.schedule import Schedule
from lockwatch.web_config import WebConfig

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


class LockRole(enum.StrEnum):
    MUTEX = "mutex"  # expected to be held briefly, by anyone allowed
    LEADER = "leader"  # expected to be held continuously by one allowed holder


IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class AllowedHolders:
    """Who may hold a named lock. An empty list of either kind allows any.

    ``local`` among the addresses allows Unix-socket clients, which have no
    client address.
    """

    applications: tuple[str, ...] = ()  # fnmatch patterns of application_name
    networks: tuple[IpNetwork, ...] = ()
    local: bool = False

    @property
    def restricted(self) -> bool:
        return bool(self.applications or self.networks or self.local)

    def allows(self, application_name: str, client_addr: str | None) -> bool:
        """
        >>> h = AllowedHolders(("billing-*",), (ipaddress.ip_network("10.0.0.0/8"),))
        >>> h.allows("billing-cron", "10.1.2.3"), h.allows("dev-laptop", "10.1.2.3")
        (True, False)
        >>> h.allows("billing-cron", "192.168.1.4")
        False
        """
        if self.applications and not any(
            fnmatch.fnmatchcase(application_name, pattern) for pattern in self.applications
        ):
            return False
        if not (self.networks or self.local):
            return True
        if client_addr is None:
            return self.local
        try:
            address = ipaddress.ip_address(client_addr.split("/", 1)[0])
        except ValueError:
            return False
        return any(address in network for network in self.networks)


@dataclass(frozen=True, slots=True)
class NamedLock:
    name: str
    key: LockKey
    role: LockRole = LockRole.MUTEX
    database: str | None = None  # None: the key is meant in every database of the target
    max_hold: float | None = (
        None  # seconds; None: the target's default (mutex) or unlimited (leader)
    )
    orphan_after: float | None = None  # seconds; None: the target's default (mutex) or off (leader)
    allowed: AllowedHolders = field(default_factory=AllowedHolders)
    ignore: bool = False

    def matches(self, database: str, key: LockKey) -> bool:
        return self.key == key and (self.database is None or self.database == database)


@dataclass(frozen=True, slots=True)
class LockSettings:
    max_hold: float = 300.0  # seconds a lock may be held before lock_held_too_long
    orphan_after: float = 600.0  # seconds a holder may sit idle before lock_orphaned
    convoy_waiters: int = 2  # waiting sessions on one key that make a convoy
    convoy_wait: float = 5.0  # ... once the longest of them has waited this long
    top_n: int = 20  # unnamed locks exported individually, longest-held first
    ignore: tuple[LockKey, ...] = ()  # keys libraries hold on purpose
    named: tuple[NamedLock, ...] = ()

    def named_lock(self, database: str, key: LockKey) -> NamedLock | None:
        for lock in self.named:
            if lock.matches(database, key):
                return lock
        return None

    def ignored(self, database: str, key: LockKey) -> bool:
        named = self.named_lock(database, key)
        if named is not None:
            return named.ignore
        return key in self.ignore


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
class PoolerSpec:
    """pgbouncer's admin console, read to join its server connections to pg_locks."""

    dsn: str = field(repr=False)  # dbname=pgbouncer, a stats_users login is enough


@dataclass(frozen=True, slots=True)
class PingSettings:
    """``POST /ping/<job>/...``: the token clients must send, and where runs are kept."""

    token: str | None = field(default=None, repr=False)  # None: pings are refused
    store_dsn: str | None = field(default=None, repr=False)  # None: SQLite in the state dir
    table: str = "lockwatch_job_runs"


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


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job lockwatch follows: its schedule and limits, and where its runs come from."""

    name: str
    schedule: Schedule | None = None
    max_duration: float | None = None  # seconds a run may take before job_too_long
    lookback: float = 2 * 86400.0  # seconds of run history considered
    event_ttl: float = 3600.0  # seconds a duplicate start or a failure stays a finding
    target: str | None = (
        None  # the target whose findings it joins (and whose database the query reads)
    )
    query: str | None = None  # the SQL source's query; None: runs come from pings

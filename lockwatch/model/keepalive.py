"""What ends a backend whose client has vanished, and so the advisory locks it
holds: the server's keepalive and timeout settings, a pooler's, and the
estimate made of them (``detect/keepalive.py``)."""

from __future__ import annotations

from dataclasses import dataclass

# Linux's keepalive defaults (net.ipv4.tcp_keepalive_time, _intvl, _probes),
# which a server setting of 0 leaves in force.
LINUX_KEEPALIVE = (7200.0, 75.0, 9)


@dataclass(frozen=True, slots=True)
class ServerTimeouts:
    """The server's settings in seconds, as one session read them; None: off
    (0), or not in this version."""

    major: int
    tcp_keepalives_idle: float | None  # None: the operating system's default
    tcp_keepalives_interval: float | None
    tcp_keepalives_count: int | None
    idle_session_timeout: float | None  # 14+
    idle_in_transaction_session_timeout: float | None
    client_connection_check_interval: float | None  # 14+
    # The session that read them came over TCP: a 0 above was then the
    # kernel's value read back; over a Unix socket the server shows 0 for all.
    over_tcp: bool = True


@dataclass(frozen=True, slots=True)
class PoolerTimeouts:
    """pgbouncer's limits on a server connection (SHOW CONFIG), in seconds; None: off."""

    server_lifetime: float | None
    server_idle_timeout: float | None
    pool_mode: str | None
    known: bool = True  # False: a pooler was seen, its admin console not read


@dataclass(frozen=True, slots=True)
class OrphanLifetime:
    """How long a backend whose client vanished can keep its advisory locks."""

    idle_seconds: float | None  # an idle backend; None: until the server restarts
    idle_bound_by: str  # what ends it first, in words
    in_transaction_seconds: float | None  # a backend left idle in a transaction
    in_transaction_bound_by: str
    shorten: tuple[str, ...]  # the settings that would shorten it
    assumed: tuple[str, ...]  # what was not read but assumed (the kernel's defaults)

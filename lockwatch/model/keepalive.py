"""What ends a backend whose client has vanished, and so the advisory locks it
holds: the server's keepalive and timeout settings, a pooler's, and the
estimate made of them (``detect/keepalive.py``)."""

from __future__ import annotations

from dataclasses import dataclass

# Linux's keepalive defaults (net.ipv4.tcp_keepalive_time, _intvl, _probes),
# which a server setting of 0 leaves in force.
LINUX_KEEPALIVE = (7200.0, 75.0, 9)
# The settings that end a backend whose client vanished, as ServerTimeouts names them.
TIMEOUT_SETTINGS = (
    "tcp_keepalives_idle",
    "tcp_keepalives_interval",
    "tcp_keepalives_count",
    "idle_session_timeout",
    "idle_in_transaction_session_timeout",
    "client_connection_check_interval",
)


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
    # The settings set for the role or database of the session these are
    # for (ALTER ROLE / ALTER DATABASE ... SET): (name, where set).
    set_by: tuple[tuple[str, str], ...] = ()
    assumed: tuple[str, ...] = ()  # what was not seen but taken, in words


@dataclass(frozen=True, slots=True)
class RoleSetting:
    """One setting of ``pg_db_role_setting``: what a session of ``role`` in
    ``database`` starts with, in seconds (a count for tcp_keepalives_count)."""

    name: str
    seconds: float | None  # None: off (0)
    role: str | None  # None: every role
    database: str | None  # None: every database

    @property
    def scope(self) -> str:
        """Where it was set, as the statement that sets it.

        >>> RoleSetting("idle_session_timeout", 60.0, "app", "shop").scope
        'ALTER ROLE app IN DATABASE shop'
        """
        if self.role is None:
            return f"ALTER DATABASE {self.database}"
        return f"ALTER ROLE {self.role}" + (
            f" IN DATABASE {self.database}" if self.database else ""
        )


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """What ends an orphan on one server, as read: the server's own values
    (postgresql.conf, ALTER SYSTEM, the built-in defaults), never those of
    the session that read them (lockwatch sets its own timeouts on its
    session), and the values set per role and database, which a holder's
    session starts with instead."""

    server: ServerTimeouts
    role_settings: tuple[RoleSetting, ...] = ()
    # Settings whose server value the reading session could not see (its own
    # role or database sets them): ``server`` holds PostgreSQL's built-in value.
    hidden: tuple[str, ...] = ()


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

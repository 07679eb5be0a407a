"""How long will an orphan live here? The time a backend whose client vanished
(a host gone, a NAT or firewall that forgot the connection) can keep its
advisory locks, from the server's settings and a pooler's.

A backend learns that its client is gone only from TCP keepalive (the kernel
gives up after idle + interval x count without an answer: on Linux's defaults
2 h 11 min), from a timeout that ends the session first, or, behind a
transaction pooler, never: the pooler is its client, alive, and keeps the
server connection (and its session locks) until it retires it. A client that is
still there but forgot its lock (seed 003's pool) is ended by none of these.

What a backend starts with is the server's value unless its role or database
has its own (ALTER ROLE / ALTER DATABASE ... SET): ``timeouts_for`` takes
those of the holder's role and database. A value a session SETs itself is
seen by no other session, lockwatch included.

Pure: the settings come in read (``sample/keepalive.py``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from lockwatch.model.finding_kinds import FindingKind
from lockwatch.model.keepalive import (
    LINUX_KEEPALIVE,
    OrphanLifetime,
    PoolerTimeouts,
    RoleSetting,
    ServerSettings,
    ServerTimeouts,
)
from lockwatch.model.pooler import SHARED_POOL_MODES
from lockwatch.text import format_duration

if TYPE_CHECKING:
    # Drafts only pass through: ``lockwatch doctor`` reads this module
    # without loading the detectors and every finding's evidence.
    from lockwatch.detect.lock_groups import Draft
    from lockwatch.model.evidence import LockEvidence

# A keepalive that notices a vanished client in about 1 min 30 s.
SHORT_KEEPALIVE = (60.0, 10.0, 3)
KEEPALIVE_WORTH_SHORTENING = 300.0
POOLER_LIFETIME_WORTH_SHORTENING = 3600.0

Bound = tuple[float, str]


def _rank(setting: RoleSetting, role: str | None, database: str | None) -> int | None:
    """How closely a per-role or per-database setting applies to a session of
    ``role`` in ``database`` (PostgreSQL's order: role in database, then role,
    then database); None: it does not."""
    if setting.role is not None and setting.role != role:
        return None
    if setting.database is not None and setting.database != database:
        return None
    if setting.role is not None:
        return 0 if setting.database is not None else 1
    return 2


def timeouts_for(
    settings: ServerSettings, role: str | None, database: str | None
) -> ServerTimeouts:
    """The values a session of ``role`` in ``database`` starts with: the
    server's, where its role and database set none of their own.

    >>> from lockwatch.model.keepalive import RoleSetting
    >>> server = ServerTimeouts(16, None, None, None, None, None, None)
    >>> own = RoleSetting("idle_in_transaction_session_timeout", 30.0, "app", None)
    >>> timeouts = timeouts_for(ServerSettings(server, (own,)), "app", "shop")
    >>> timeouts.idle_in_transaction_session_timeout, timeouts.set_by
    (30.0, (('idle_in_transaction_session_timeout', 'ALTER ROLE app'),))
    >>> timeouts_for(ServerSettings(server, (own,)), "worker", "shop").set_by
    ()
    """
    chosen: dict[str, tuple[int, RoleSetting]] = {}
    for setting in settings.role_settings:
        rank = _rank(setting, role, database)
        if rank is not None and (setting.name not in chosen or rank < chosen[setting.name][0]):
            chosen[setting.name] = (rank, setting)
    values: dict[str, float | int | None] = {
        name: setting.seconds for name, (_, setting) in chosen.items()
    }
    if "tcp_keepalives_count" in values and values["tcp_keepalives_count"] is not None:
        values["tcp_keepalives_count"] = int(values["tcp_keepalives_count"] or 0)
    assumed = tuple(
        f"{name}: the server's value is not visible to lockwatch (its own role or database "
        "sets one), taken as PostgreSQL's built-in default"
        for name in settings.hidden
        if name not in chosen
    )
    return replace(
        settings.server,
        **values,  # type: ignore[arg-type]
        set_by=tuple(sorted((name, setting.scope) for name, (_, setting) in chosen.items())),
        assumed=assumed,
    )


def _named(server: ServerTimeouts, name: str) -> str:
    """A setting's name, with where it was set when its role or database set it."""
    scope = dict(server.set_by).get(name)
    return f"{name} ({scope})" if scope else name


def keepalive_bound(server: ServerTimeouts) -> tuple[Bound, tuple[str, ...]]:
    """(seconds until the kernel gives up on a silent client, in words) and what
    was assumed: a setting of 0 leaves the kernel's default, which a session
    over TCP reads back and one over a Unix socket cannot."""
    read = (server.tcp_keepalives_idle, server.tcp_keepalives_interval, server.tcp_keepalives_count)
    assumed = tuple(
        f"{name} = {default:g} (Linux's default; {'off' if server.over_tcp else 'not shown'} on the server)"
        for name, value, default in zip(
            ("tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count"),
            read,
            LINUX_KEEPALIVE,
            strict=True,
        )
        if value is None
    )
    idle = server.tcp_keepalives_idle or LINUX_KEEPALIVE[0]
    interval = server.tcp_keepalives_interval or LINUX_KEEPALIVE[1]
    count = server.tcp_keepalives_count or LINUX_KEEPALIVE[2]
    seconds = idle + interval * count
    words = (
        f"TCP keepalive ({format_duration(idle)} idle + {count} probes x "
        f"{format_duration(interval)} = {format_duration(seconds)})"
    )
    return (seconds, words), assumed


def _first(bounds: list[Bound], otherwise: str) -> tuple[float | None, str]:
    if not bounds:
        return None, otherwise
    return min(bounds)


def _pooled(pooler: PoolerTimeouts | None) -> bool:
    return pooler is not None and pooler.pool_mode in SHARED_POOL_MODES


def _idle_bounds(
    server: ServerTimeouts, pooler: PoolerTimeouts | None, keepalive: Bound
) -> list[Bound]:
    """What ends an idle orphan. Behind a transaction pooler the worst case is a
    busy pool: the server connection is lent to others, so it is never idle
    for server_idle_timeout or idle_session_timeout, and only server_lifetime
    retires it (between two of its transactions)."""
    if _pooled(pooler):
        assert pooler is not None
        if pooler.server_lifetime is None:
            return []
        quiet = pooler.server_idle_timeout
        sooner = (
            f" (on a quiet pool sooner: server_idle_timeout {format_duration(quiet)})"
            if quiet is not None and quiet < pooler.server_lifetime
            else ""
        )
        return [(pooler.server_lifetime, f"pgbouncer's server_lifetime{sooner}")]
    bounds = [keepalive]
    if server.idle_session_timeout is not None:
        bounds.append((server.idle_session_timeout, _named(server, "idle_session_timeout")))
    return bounds


def _shorten(server: ServerTimeouts, pooler: PoolerTimeouts | None, keepalive: Bound) -> list[str]:
    advice = []
    if not _pooled(pooler) and keepalive[0] > KEEPALIVE_WORTH_SHORTENING:
        idle, interval, count = SHORT_KEEPALIVE
        advice.append(
            f"tcp_keepalives_idle = {idle:g}, tcp_keepalives_interval = {interval:g}, "
            f"tcp_keepalives_count = {count} (a vanished client is noticed in about "
            f"{format_duration(idle + interval * count)})"
        )
    if server.major >= 14 and server.idle_session_timeout is None:
        advice.append(
            "idle_session_timeout, per role (ALTER ROLE app SET idle_session_timeout = '30min', "
            "above its pool's own idle timeout): it ends idle sessions whatever their client"
        )
    if server.idle_in_transaction_session_timeout is None:
        advice.append("idle_in_transaction_session_timeout = '5min'")
    if server.major >= 14 and server.client_connection_check_interval is None:
        advice.append(
            "client_connection_check_interval = '10s' (a backend running a statement "
            "notices its client is gone)"
        )
    if _pooled(pooler):
        assert pooler is not None
        lifetime = pooler.server_lifetime
        if pooler.known and (lifetime is None or lifetime > POOLER_LIFETIME_WORTH_SHORTENING):
            advice.append("pgbouncer server_lifetime = 3600 (it retires a server connection)")
        advice.append(
            "better: session locks over a direct DSN, or pg_advisory_xact_lock inside one "
            "transaction, which no pooler can leave behind"
        )
    return advice


def orphan_lifetime(server: ServerTimeouts, pooler: PoolerTimeouts | None = None) -> OrphanLifetime:
    """The longest an orphaned backend keeps its locks here, idle and idle in a
    transaction, with what ends it and the settings that would end it sooner.

    >>> server = ServerTimeouts(16, None, None, None, None, None, None)
    >>> from lockwatch.text import format_duration
    >>> format_duration(orphan_lifetime(server).idle_seconds or 0)
    '2h11m'
    """
    keepalive, assumed = keepalive_bound(server)
    forever = "nothing on the server ends it (until a restart)"
    kept = forever
    if _pooled(pooler):
        assert pooler is not None
        kept = (
            "nothing while the pool is busy: pgbouncer's server_lifetime is off"
            if pooler.known
            else "the pooler, when it retires the server connection (doctor --pgbouncer "
            "ADMIN_DSN reads when)"
        )
    idle, idle_by = _first(_idle_bounds(server, pooler, keepalive), kept)
    # A client gone mid-transaction: a pooler closes that server connection
    # once it notices (its own keepalive towards the client), the server once
    # its keepalive or idle_in_transaction_session_timeout ends it.
    in_transaction = [keepalive]
    if server.idle_in_transaction_session_timeout is not None:
        in_transaction.append(
            (
                server.idle_in_transaction_session_timeout,
                _named(server, "idle_in_transaction_session_timeout"),
            )
        )
    xact, xact_by = _first(in_transaction, forever)
    return OrphanLifetime(
        idle,
        idle_by,
        xact,
        xact_by,
        tuple(_shorten(server, pooler, keepalive)),
        assumed + server.assumed,
    )


def describe(lifetime: OrphanLifetime) -> str:
    """``up to 2h11m, ended by TCP keepalive (...) (idle or in a transaction)``"""

    def up_to(seconds: float | None, by: str) -> str:
        return by if seconds is None else f"up to {format_duration(seconds)}, ended by {by}"

    idle = up_to(lifetime.idle_seconds, lifetime.idle_bound_by)
    xact = up_to(lifetime.in_transaction_seconds, lifetime.in_transaction_bound_by)
    if idle == xact:
        return f"{idle} (idle or in a transaction)"
    return f"idle: {idle}; idle in a transaction: {xact}"


def with_lifetime(draft: Draft, timeouts: ServerSettings | None) -> Draft:
    """An orphan's draft with how long it can live on this server: by the
    settings its holder's role and database start a session with. Behind a
    pooler (whose own settings are not read here) the pooler retires it; a
    prepared transaction lives until it is committed or rolled back."""
    if timeouts is None or draft.kind is not FindingKind.LOCK_ORPHANED:
        return draft
    facts = draft.evidence

    def evidence() -> LockEvidence:
        built = facts()
        holder = next((h for h in draft.group.holders if h.lock.pid == built.holder_pid), None)
        if holder is None or holder.lock.prepared is not None:
            return built
        pooled = holder.pooled is not None and holder.pooled.known
        pooler = PoolerTimeouts(None, None, "transaction", False) if pooled else None
        backend = holder.backend
        role = backend.usename if backend is not None else None
        server = timeouts_for(timeouts, role, holder.lock.database)
        return replace(built, orphan_lifetime=orphan_lifetime(server, pooler))

    return replace(draft, evidence=evidence)

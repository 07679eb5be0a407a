"""``lock_pooled_session``: a session advisory lock on a server connection that
a transaction-mode pooler hands out per transaction, known from pgbouncer's
``SHOW SERVERS`` or inferred from PostgreSQL's view alone (Supavisor, RDS
Proxy, Neon's pooler have no admin console to join).

Pure: pgbouncer's view of the server comes in as a snapshot; what inference
needs of the last polls comes back as ``PoolMemory``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from lockwatch.detect.lock_groups import Draft, Holder, KeyGroup, lock_evidence
from lockwatch.model.evidence import (
    LinkedClientFacts,
    LockEvidence,
    PooledLockEvidence,
    PoolFacts,
    ServerConnectionFacts,
)
from lockwatch.model.findings import FindingKind, Severity
from lockwatch.model.locks import LockSnapshot
from lockwatch.model.pooler import (
    SHARED_POOL_MODES,
    PooledBackend,
    PoolerConnection,
    PoolerSnapshot,
)
from lockwatch.settings.locks import LockSettings
from lockwatch.text import one_line


def session_level(holder: Holder) -> bool:
    """Whether a held advisory lock is provably session-level.

    pg_locks does not say; but a transaction-level lock ends with its
    transaction, so a lock seen held with no transaction open is a session
    lock. The hold tracker judges that against the moment the locks were read
    (``AdvisoryLock.session_level``); a lock it has not judged is judged by its
    session's state now. A hold that merely spans transactions proves
    nothing: a transaction lock taken again in each short transaction looks
    the same.
    """
    if holder.lock.session_level is not None:
        return holder.lock.session_level
    backend = holder.backend
    if backend is None or not backend.visible:
        return False  # a hidden xact_start is NULL, not proof of no transaction
    return backend.state == "idle" or backend.xact_start is None


def pooler_facts(
    pooler: PoolerSnapshot, server: PoolerConnection
) -> tuple[PoolFacts, ServerConnectionFacts, LinkedClientFacts | None]:
    """pgbouncer's view of a server connection: its pool, itself, the client it serves."""
    connection = ServerConnectionFacts(
        backend_pid=server.remote_pid,
        state=server.state,
        pooler_port=server.local_port,
        connect_time=server.connect_time,
        request_time=server.request_time,
    )
    client = pooler.client_linked_to(server)
    linked = (
        None
        if client is None
        else LinkedClientFacts(
            addr=client.addr,
            port=client.port,
            application_name=client.application_name,
            state=client.state,
            connect_time=client.connect_time,
        )
    )
    return PoolFacts(server.database, server.user, pooler.pool_mode(server)), connection, linked


# A backend: the server reuses pids, so pid + backend_start names one.
Identity = tuple[int, datetime | None]


@dataclass(frozen=True, slots=True)
class PoolMemory:
    """What inferring pooled backends keeps from one poll to the next."""

    # The application_name of each backend last seen holding a session lock.
    names: Mapping[Identity, str] = field(default_factory=dict)
    # Backends found pooled, with how, while they hold session locks.
    pooled: Mapping[Identity, str] = field(default_factory=dict)


def known_pooled(pooler: PoolerSnapshot | None, snapshot: LockSnapshot) -> dict[int, PooledBackend]:
    """The backends pgbouncer hands out per transaction or statement, by pid."""
    if pooler is None:
        return {}
    found = {}
    for lock in snapshot.locks:
        backend = snapshot.backends.get(lock.pid)
        server = pooler.server_for(lock.pid, backend.client_port if backend else None)
        if server is not None and pooler.pool_mode(server) in SHARED_POOL_MODES:
            found[lock.pid] = PooledBackend(f"{server.database}/{server.user}", inferred=False)
    return found


def unknown_pooling(
    snapshot: LockSnapshot, pooled: Mapping[int, PooledBackend]
) -> dict[int, PooledBackend]:
    """The session-lock holders not known pooled, where no pooler's console
    tells pooled backends from clients' own: pid -> a backend whose pooling is
    unknown. Its application_name and address may be the last client's of a
    pool (one client only, a pool's name never changes under the lock), so
    nobody is named as its holder."""
    return {
        pid: PooledBackend(None, inferred=False, known=False)
        for pid in snapshot.lock_summary().session_holders
        if pid not in pooled
    }


def infer_pooled(snapshot: LockSnapshot, previous: PoolMemory) -> tuple[dict[int, str], PoolMemory]:
    """Backends PostgreSQL shows to be a pooler's, without its admin console:
    pid -> how it shows, and what the next poll needs.

    A client sets its application_name once, when it connects; a pooler that
    hands one server connection to many clients sets each one's on it in
    turn. So a backend holding a session advisory lock whose application_name
    changed since the last poll, the lock held all along, serves several
    clients: likely pooled. Each backend is judged by its own history only:
    other backends from the same client address may be direct sessions on
    the pooler's host, and calling them pooled would hide their names and
    send their owners the pooled runbook. (Its query changing proves
    nothing: any busy session runs one statement after another.) Once found,
    a backend stays pooled while it holds session locks.
    """
    names: dict[Identity, str] = {}
    pooled: dict[Identity, str] = {}
    for pid in sorted(snapshot.lock_summary().session_holders):
        backend = snapshot.backends.get(pid)
        if backend is None:
            continue
        identity = (pid, backend.backend_start)
        names[identity] = backend.application_name
        before = previous.names.get(identity)
        if identity in previous.pooled:
            pooled[identity] = previous.pooled[identity]
        elif before is not None and before != backend.application_name:
            pooled[identity] = (
                f"its application_name changed from '{one_line(before)}' to "
                f"'{one_line(backend.application_name)}' while it held a session lock"
            )
    found = {pid: how for (pid, _), how in pooled.items()}
    return found, PoolMemory(names, pooled)


def _inferred_draft(
    group: KeyGroup,
    holder: Holder,
    evidence: Callable[[], LockEvidence],
    how: str | None,
    now: datetime,
) -> Draft:
    how = how or "inferred"
    summary = (
        f"session lock {group.label()} in {one_line(group.database)} held by backend pid "
        f"{holder.lock.pid}, a pooler's (inferred: {how}): it belongs to no client; "
        "any client handed this backend can take it again"
    )
    return _pooled_draft(
        group,
        holder,
        now,
        summary,
        lambda: PooledLockEvidence.of(evidence(), None, None, None, inferred=how),
    )


def pooled_session(
    group: KeyGroup,
    settings: LockSettings,
    snapshot: LockSnapshot,
    now: datetime,
    pooler: PoolerSnapshot | None,
    inferred: Mapping[int, str] | None = None,
) -> Draft | None:
    """A session lock on a pooled backend: one pgbouncer lists in a shared pool,
    or one ``inferred`` pooled (pid -> how)."""
    pooled = []
    for holder in group.holders:
        if holder.pooled is None or not session_level(holder):
            continue
        server = None
        if pooler is not None:
            backend = holder.backend
            server = pooler.server_for(holder.lock.pid, backend.client_port if backend else None)
        if server is not None or holder.pooled.inferred:
            pooled.append((holder, server))
    if not pooled:
        return None
    holder, server = min(
        pooled, key=lambda pair: (pair[0].lock.first_seen or now, pair[0].lock.pid)
    )

    def evidence() -> LockEvidence:
        return lock_evidence(group, settings, snapshot, now, holder)

    if server is None:
        return _inferred_draft(group, holder, evidence, (inferred or {}).get(holder.lock.pid), now)
    assert pooler is not None
    pool, connection, client = pooler_facts(pooler, server)
    now_serving = (
        f"now serving client {one_line(client.addr or 'local')}:{client.port}"
        f" ({one_line(client.application_name or '-')})"
        if client
        else "no client linked to it now"
    )
    summary = (
        f"session lock {group.label()} in {one_line(group.database)} held by backend pid "
        f"{holder.lock.pid} of pgbouncer pool {one_line(server.database)}/{one_line(server.user)} "
        f"in {pool.pool_mode} mode: it belongs to no client ({now_serving}); "
        "any client handed this backend can take it again"
    )
    return _pooled_draft(
        group,
        holder,
        now,
        summary,
        lambda: PooledLockEvidence.of(evidence(), pool, connection, client),
    )


def _pooled_draft(
    group: KeyGroup,
    holder: Holder,
    now: datetime,
    summary: str,
    evidence: Callable[[], PooledLockEvidence],
) -> Draft:
    """A session lock on a pooled backend: critical, since the holder first held it."""
    return Draft(
        FindingKind.LOCK_POOLED_SESSION,
        group,
        Severity.CRITICAL,
        holder.lock.first_seen or now,
        lambda: summary,
        evidence,
        holder=holder,
    )

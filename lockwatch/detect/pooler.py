"""``lock_pooled_session``: a session advisory lock on a server connection that
a transaction-mode pooler hands out per transaction.

Pure: pgbouncer's view of the server comes in as a snapshot.
"""

from __future__ import annotations

from datetime import datetime

from lockwatch.detect.lock_groups import Draft, Holder, KeyGroup, lock_evidence
from lockwatch.model.evidence import (
    LinkedClientFacts,
    PooledLockEvidence,
    PoolFacts,
    ServerConnectionFacts,
)
from lockwatch.model.findings import FindingKind, Severity
from lockwatch.model.locks import LockSnapshot
from lockwatch.model.pooler import SHARED_POOL_MODES, PoolerConnection, PoolerSnapshot
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
    if backend is None:
        return False
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


def pooled_session(
    group: KeyGroup,
    settings: LockSettings,
    snapshot: LockSnapshot,
    now: datetime,
    pooler: PoolerSnapshot,
) -> Draft | None:
    pooled = []
    for holder in group.holders:
        server = pooler.server_for(
            holder.lock.pid, holder.backend.client_port if holder.backend else None
        )
        if server is None or pooler.pool_mode(server) not in SHARED_POOL_MODES:
            continue
        if session_level(holder):
            pooled.append((holder, server))
    if not pooled:
        return None
    holder, server = min(
        pooled, key=lambda pair: (pair[0].lock.first_seen or now, pair[0].lock.pid)
    )
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
    return Draft(
        FindingKind.LOCK_POOLED_SESSION,
        group,
        Severity.CRITICAL,
        holder.lock.first_seen or now,
        lambda: summary,
        lambda: PooledLockEvidence.of(
            lock_evidence(group, settings, snapshot, now, holder), pool, connection, client
        ),
    )

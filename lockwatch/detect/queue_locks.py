"""What a queue's worker sessions wait on, for the queue detectors
(``detect/queues.py``): the advisory locks, and the chain from a stalled
queue to the lock most of its workers wait on and its holder, or to the
root of their waits on other locktypes (a row a hung worker claimed).

Pure: the same poll's lock snapshot and lock findings in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from lockwatch.detect.evidence import age_seconds, session_args
from lockwatch.model.evidence import LockHolderFacts, QueueLockChain
from lockwatch.model.findings import Family, Finding, Related, Subject
from lockwatch.model.lock_waits import LockWait, roots_of, wait_label
from lockwatch.model.locks import Backend, LockKey, LockSnapshot
from lockwatch.model.queues import SessionWait
from lockwatch.settings.locks import LockSettings
from lockwatch.text import client_address, format_duration, one_line


def lock_label(database: str, key: LockKey, settings: LockSettings) -> str:
    named = settings.named_lock(database, key)
    return named.name if named is not None else key.render()


def waiting_on(
    sessions: Iterable[Backend], snapshot: LockSnapshot | None, settings: LockSettings
) -> tuple[SessionWait, ...]:
    """The advisory locks these sessions wait on, most waiters first."""
    if snapshot is None:
        return ()
    pids = {backend.pid for backend in sessions}
    waits: dict[tuple[str, LockKey], int] = {}
    for lock in snapshot.locks:
        if not lock.granted and lock.pid in pids:
            waits[lock.database, lock.key] = waits.get((lock.database, lock.key), 0) + 1
    ordered = sorted(waits.items(), key=lambda item: (-item[1], item[0]))
    return tuple(
        SessionWait(database, lock_label(database, key, settings), key.render(), count)
        for (database, key), count in ordered
    )


@dataclass(frozen=True, slots=True)
class LockContext:
    """The same poll's advisory locks, to explain a stall."""

    snapshot: LockSnapshot | None
    settings: LockSettings
    findings: tuple[Finding, ...] = ()


def lock_chain(
    bound: Sequence[tuple[str, Sequence[Backend]]], now: datetime, context: LockContext
) -> tuple[QueueLockChain | None, tuple[Related, ...]]:
    """The advisory lock most of a queue's worker sessions (``bound``: by
    worker group) wait on, else the root of their waits on other locktypes;
    its holders, and the lock findings about it."""
    snapshot = context.snapshot
    if snapshot is None or not bound:
        return None, ()
    sessions = [backend for _, group in bound for backend in group]
    group_of = {backend.pid: name for name, group in bound for backend in group}
    waits = waiting_on(sessions, snapshot, context.settings)
    if not waits:
        return _other_lock_chain(sessions, group_of, now, context)
    wait = waits[0]
    key = LockKey.parse(wait.key)
    holders = tuple(
        LockHolderFacts(
            **session_args(snapshot.backends.get(lock.pid), lock.pid, now),
            held_seconds=age_seconds(now, lock.first_seen),
            worker_group=group_of.get(lock.pid),
            backend_start=_backend_start(snapshot.backends.get(lock.pid)),
        )
        for lock in sorted(snapshot.holders(wait.database, key), key=lambda lock: lock.pid)
    )
    subject = Subject(wait.database, wait.lock)
    related = tuple(
        Related(f.kind, f.target, f.subject) for f in context.findings if f.subject == subject
    )
    chain = QueueLockChain(
        database=wait.database,
        lock=wait.lock,
        key=wait.key,
        waiting_sessions=wait.sessions,
        worker_sessions=len(sessions),
        holders=holders,
    )
    return chain, related


def _other_lock_chain(
    sessions: Sequence[Backend], group_of: Mapping[int, str], now: datetime, context: LockContext
) -> tuple[QueueLockChain | None, tuple[Related, ...]]:
    """The session most of the queue's worker sessions wait on through a lock
    of another locktype (a row a hung worker claimed with FOR UPDATE, a table
    an ALTER waits for): the root of their waits, which the lock wait findings
    about that root name too, so the stall joins their incident."""
    snapshot = context.snapshot
    pids = {backend.pid for backend in sessions}
    mine = [wait for wait in snapshot.waits if wait.pid in pids] if snapshot else []
    if snapshot is None or not mine:
        return None, ()
    roots = roots_of(snapshot.waits)
    by_root: dict[int, list[LockWait]] = {}
    for wait in mine:
        by_root.setdefault(roots[wait.pid], []).append(wait)
    root, waits = min(by_root.items(), key=lambda item: (-len(item[1]), item[0]))
    label = wait_label(waits[0])
    backend = snapshot.backends.get(root)
    holders = (
        ()
        if root == 0 or root in roots  # a prepared transaction's, or a deadlock's
        else (
            LockHolderFacts(
                **session_args(backend, root, now),
                held_seconds=None,  # pg_locks does not date a grant
                worker_group=group_of.get(root),
                backend_start=_backend_start(backend),
            ),
        )
    )
    waiter = snapshot.backends.get(waits[0].pid)
    chain = QueueLockChain(
        database=waiter.database if waiter and waiter.database else "",
        lock=label,
        key=label,
        waiting_sessions=len(waits),
        worker_sessions=len(sessions),
        holders=holders,
        locktype=waits[0].locktype,
    )
    blamed = f"pid {root}"
    related = tuple(
        Related(f.kind, f.target, f.subject)
        for f in context.findings
        if f.subject.lock == blamed and f.kind.family is Family.LOCKS
    )
    return chain, related


def _backend_start(backend: Backend | None) -> datetime | None:
    return None if backend is None else backend.backend_start


def chain_text(chain: QueueLockChain) -> str:
    label = chain.lock if chain.lock == chain.key else f"{chain.lock} ({chain.key})"
    on = "lock " if chain.locktype == "advisory" else ""
    text = (
        f"{chain.waiting_sessions} of {chain.worker_sessions} worker sessions wait on "
        f"{on}{one_line(label)}"
    )
    if not chain.holders:
        return text + ", holder not seen"
    holder = chain.holders[0]
    where = one_line(client_address(holder.client_addr, holder.client_port, holder.client_hostname))
    text += (
        f" held by pid {holder.pid} "
        f"({one_line(holder.application_name or 'no application_name')} from {where})"
    )
    if holder.state_seconds is not None and holder.state != "active":
        text += f" {one_line(holder.state)} {format_duration(holder.state_seconds)}"
    if holder.query:
        text += f' since "{one_line(holder.query)}"'
    return text

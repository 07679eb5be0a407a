"""One hold, one finding: a lock finding fires at most once while the same
session holds its key, and resolves once, when that session lets go.

A convoy whose waiters give up and queue again, an orphan whose pooled session
is lent out for a moment, a long hold on a busy server: each of them is one
problem for as long as one session (pid + backend_start) holds the key. A lock
finding that the detectors did not raise this poll stays active as it was
(the runner's ledger holds it) while a session that held its key when it last
fired holds it still.

Pure: what the next poll needs comes back as ``HoldMemory``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from lockwatch.model.findings import Family, Finding, FindingKind, Subject
from lockwatch.model.locks import LockKey, LockSnapshot
from lockwatch.settings.locks import LockSettings

# A session: the server reuses pids, so pid + backend_start names one.
Identity = tuple[int, datetime | None]
# (kind, subject) of each lock finding -> the sessions that held its key.
HoldMemory = Mapping[tuple[FindingKind, Subject], frozenset[Identity]]

# About a key and its holders; leader_lock_missing is about nobody holding it,
# leader_lock_churn about its holders over a window (it ends with the window).
STICKY = FindingKind.of(Family.LOCKS) - {
    FindingKind.LEADER_LOCK_MISSING,
    FindingKind.LEADER_LOCK_CHURN,
}


def _key_of(subject: Subject, settings: LockSettings) -> LockKey | None:
    """The key a lock finding's subject names: a configured name, or the key
    as the application wrote it."""
    if subject.database is None or subject.lock is None:
        return None
    for named in settings.named:
        if named.name == subject.lock and named.database in (None, subject.database):
            return named.key
    try:
        return LockKey.parse(subject.lock)
    except ValueError:
        return None  # the overflow finding, "(more locks)"


def _holders(
    snapshot: LockSnapshot, wanted: Mapping[tuple[str, LockKey], Subject]
) -> dict[Subject, frozenset[Identity]]:
    """The sessions holding the wanted keys now, by the subject that names them."""
    found: dict[Subject, set[Identity]] = {}
    for lock in snapshot.locks:
        subject = wanted.get((lock.database, lock.key)) if lock.granted else None
        if subject is not None:
            backend = snapshot.backends.get(lock.pid)
            found.setdefault(subject, set()).add(
                (lock.pid, None if backend is None else backend.backend_start)
            )
    return {subject: frozenset(ids) for subject, ids in found.items()}


def within_hold(
    findings: Iterable[Finding],
    previous: HoldMemory,
    snapshot: LockSnapshot,
    settings: LockSettings,
) -> tuple[
    frozenset[tuple[FindingKind, Subject]], dict[tuple[FindingKind, Subject], frozenset[Identity]]
]:
    """(held, memory): the (kind, subject) of the last polls' lock findings not
    raised now whose key a session that held it then holds still, to stay
    active as they were; and what the next poll needs."""
    raised = [(f.kind, f.subject) for f in findings if f.kind in STICKY]
    pairs = set(raised) | set(previous)
    if not pairs:
        return frozenset(), {}
    wanted: dict[tuple[str, LockKey], Subject] = {}
    for _, subject in pairs:
        key = _key_of(subject, settings)
        if key is not None and subject.database is not None:
            wanted[(subject.database, key)] = subject
    holders = _holders(snapshot, wanted)
    memory = {pair: holders[pair[1]] for pair in raised if pair[1] in holders}
    held = set()
    for pair, sessions in previous.items():
        still = sessions & holders.get(pair[1], frozenset())
        if pair not in memory and still:
            held.add(pair)
            memory[pair] = still
    return frozenset(held), memory

"""One hold, one finding: a lock finding fires at most once while the same
session holds its key (for a finding about a holder, the key of its longest
hold), and resolves once, when that session lets go.

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

from lockwatch.model.evidence import LockEvidence
from lockwatch.model.findings import Family, Finding, FindingKind, Subject
from lockwatch.model.locks import LockKey, LockSnapshot
from lockwatch.settings.locks import LockSettings

# A session: the server reuses pids, so pid + backend_start names one.
Identity = tuple[int, datetime | None]
# The key a lock finding watches: (database, key).
Watched = tuple[str, LockKey]
# (kind, subject) of each lock finding -> its key and the sessions that held it.
Hold = tuple[Watched, frozenset[Identity]]
HoldMemory = Mapping[tuple[FindingKind, Subject], Hold]

# About a key and its holders; leader_lock_missing is about nobody holding it,
# leader_lock_churn about its holders over a window (it ends with the window).
STICKY = FindingKind.of(Family.LOCKS) - {
    FindingKind.LEADER_LOCK_MISSING,
    FindingKind.LEADER_LOCK_CHURN,
}


def _watched(finding: Finding, settings: LockSettings) -> Watched | None:
    """The key a lock finding is about: the one its subject names (a
    configured name, or the key as the application wrote it), or for a
    finding about a holder the key of its longest hold."""
    subject = finding.subject
    if subject.database is None or subject.lock is None:
        return None  # "(more sessions)"
    for named in settings.named:
        if named.name == subject.lock and named.database in (None, subject.database):
            return (subject.database, named.key)
    evidence = finding.evidence
    text = evidence.key if isinstance(evidence, LockEvidence) else subject.lock
    try:
        return (subject.database, LockKey.parse(text))
    except ValueError:
        return None


def _holders(snapshot: LockSnapshot, wanted: set[Watched]) -> dict[Watched, frozenset[Identity]]:
    """The sessions holding the wanted keys now (kept with the summary while
    the locks and the keys stay the same: a steady flood makes no pass over them)."""
    if not wanted:
        return {}
    holders = snapshot.lock_summary().key_holders(frozenset(wanted))
    found: dict[Watched, frozenset[Identity]] = {}
    for watched in wanted:
        pids = holders.get(watched)
        if pids:
            found[watched] = frozenset((pid, _started(snapshot, pid)) for pid, _ in pids)
    return found


def _started(snapshot: LockSnapshot, pid: int) -> datetime | None:
    backend = snapshot.backends.get(pid)
    return None if backend is None else backend.backend_start


def within_hold(
    findings: Iterable[Finding],
    previous: HoldMemory,
    snapshot: LockSnapshot,
    settings: LockSettings,
) -> tuple[frozenset[tuple[FindingKind, Subject]], dict[tuple[FindingKind, Subject], Hold]]:
    """(held, memory): the (kind, subject) of the last polls' lock findings not
    raised now whose key a session that held it then holds still, to stay
    active as they were; and what the next poll needs."""
    raised = {
        (f.kind, f.subject): watched
        for f in findings
        if f.kind in STICKY and (watched := _watched(f, settings)) is not None
    }
    if not raised and not previous:
        return frozenset(), {}
    holders = _holders(snapshot, set(raised.values()) | {w for w, _ in previous.values()})
    memory = {pair: (w, holders[w]) for pair, w in raised.items() if w in holders}
    held = set()
    for pair, (watched, sessions) in previous.items():
        still = sessions & holders.get(watched, frozenset())
        if pair not in memory and still:
            held.add(pair)
            memory[pair] = (watched, still)
    return frozenset(held), memory

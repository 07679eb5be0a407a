"""Findings about waits on locks of other locktypes than advisory, each about
the session at the root of the waits (one finding per root and kind):

- ``lock_queue``: a strong lock (DDL, LOCK TABLE, VACUUM FULL, REINDEX,
  CREATE INDEX) waits behind the root with sessions queued behind it;
- ``row_lock_convoy``: sessions wait on a row (a tuple or transaction id)
  the root holds, past a budget;
- ``idle_in_transaction_blocker``: the root is idle in transaction and a
  session has waited on it past a budget.

Pure: the snapshot's waits (``model/lock_waits.py``) and the settings in,
findings out. The budgets decide, never the existence of a wait: short
routine waits are no finding.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from lockwatch.detect.evidence import age_seconds, seconds_between, session_args
from lockwatch.model.evidence import HolderFacts, LockWaitEvidence, PreparedFacts, WaitingFacts
from lockwatch.model.findings import Finding, FindingKind, Severity, Subject
from lockwatch.model.lock_waits import ROW_LOCKTYPES, LockWait, PreparedXact, roots_of
from lockwatch.model.locks import LockSnapshot
from lockwatch.model.remediation import IN_TRANSACTION
from lockwatch.settings.locks import LockSettings
from lockwatch.text import format_duration, one_line, truncate

WAITERS_LISTED = 20  # waiters a finding's evidence lists; the rest are counted
LOCK_TIMEOUT_ADVICE = (
    "run migrations under a lock_timeout (SET lock_timeout = '5s', and retry) so a "
    "statement that cannot get its lock fails fast instead of queueing every query behind it"
)


@dataclass(frozen=True, slots=True)
class _Rooted:
    """The waits whose chains end at one session (or prepared transaction)."""

    root: int  # 0: a prepared transaction's
    waits: tuple[LockWait, ...]  # the longest-waiting first
    prepared: PreparedXact | None = None


def detect_lock_waits(
    snapshot: LockSnapshot, settings: LockSettings, now: datetime
) -> list[Finding]:
    """The lock_queue, row_lock_convoy and idle_in_transaction_blocker
    findings of the snapshot's waits."""
    if not snapshot.waits:
        return []
    roots = roots_of(snapshot.waits)
    by_root: dict[int, list[LockWait]] = {}
    for wait in snapshot.waits:
        by_root.setdefault(roots[wait.pid], []).append(wait)
    findings: list[Finding] = []
    for root, waits in sorted(by_root.items()):
        if root in roots:
            continue  # a deadlock cycle: the server breaks it
        for rooted in _rooted(root, waits, snapshot.waits, now):
            for check in (_lock_queue, _row_lock_convoy, _idle_blocker):
                finding = check(snapshot, settings, now, rooted)
                if finding is not None:
                    findings.append(finding)
    return findings


def _rooted(
    root: int, waits: list[LockWait], every: tuple[LockWait, ...], now: datetime
) -> list[_Rooted]:
    """The waits of one root; those of pid 0 by the prepared transaction at
    the end of each chain (one it waits on directly, or through the waiter
    ahead of it), a chain to one not read left out."""
    if root != 0:
        return [_Rooted(root, tuple(sorted(waits, key=lambda w: -_waited(w, now))))]
    waiting = {wait.pid: wait for wait in every}
    by_gid: dict[str, list[LockWait]] = {}
    prepared: dict[str, PreparedXact] = {}
    for wait in waits:
        step, seen = wait, {wait.pid}
        while step.prepared is None and (ahead := waiting.get(step.blockers[0])) is not None:
            if ahead.pid in seen:
                break
            step = ahead
            seen.add(step.pid)
        if step.prepared is not None:
            prepared[step.prepared.gid] = step.prepared
            by_gid.setdefault(step.prepared.gid, []).append(wait)
    return [
        _Rooted(0, tuple(sorted(gid_waits, key=lambda w: -_waited(w, now))), prepared[gid])
        for gid, gid_waits in sorted(by_gid.items())
    ]


def _waited(wait: LockWait, now: datetime) -> float:
    return seconds_between(now, wait.wait_start)


def _lock_queue(
    snapshot: LockSnapshot, settings: LockSettings, now: datetime, rooted: _Rooted
) -> Finding | None:
    """A strong lock's wait with at least ``queue_waiters`` sessions queued
    behind it, the last of them for ``queue_wait``."""
    for strong in (wait for wait in rooted.waits if wait.strong):
        behind = sorted(
            (_waited(w, now) for w in rooted.waits if w.tag == strong.tag and strong.pid in w.soft),
            reverse=True,
        )
        if len(behind) < settings.queue_waiters:
            continue
        if behind[settings.queue_waiters - 1] < settings.queue_wait:
            continue
        waiting = _waiting_facts(snapshot, strong, now)
        summary = (
            f"{one_line(strong.mode)} on {one_line(strong.relation or strong.tag)} "
            f"(pid {strong.pid}: {one_line(waiting.query or '?')}) waits behind "
            f"{_who(snapshot, rooted, now)}, with {len(behind)} sessions queued behind it"
        )
        advice = (
            f"cancel the waiting statement (pid {strong.pid}) or end the session at the root; "
            + LOCK_TIMEOUT_ADVICE
        )
        return _finding(
            snapshot,
            FindingKind.LOCK_QUEUE,
            Severity.CRITICAL,
            now,
            rooted,
            summary,
            (waiting, len(behind), settings.queue_wait, advice, strong.relation),
        )
    return None


def _row_lock_convoy(
    snapshot: LockSnapshot, settings: LockSettings, now: datetime, rooted: _Rooted
) -> Finding | None:
    """Sessions waiting on a row the root holds, the longest past ``row_lock_wait``."""
    rows = [wait for wait in rooted.waits if wait.locktype in ROW_LOCKTYPES]
    if not rows or _waited(rows[0], now) < settings.row_lock_wait:
        return None
    relation = next((wait.relation for wait in rows if wait.relation), None)
    summary = (
        f"{len(rows)} sessions wait on a row{_on(relation)} held by "
        f"{_who(snapshot, rooted, now)}, the longest for "
        f"{format_duration(_waited(rows[0], now))}"
    )
    advice = (
        "see what the holder is doing (its state and last query): a worker that holds a row "
        "lock across an outside call stalls every worker that needs the row; end its session "
        "if it is stuck, and claim jobs with SELECT ... FOR UPDATE SKIP LOCKED"
    )
    return _finding(
        snapshot,
        FindingKind.ROW_LOCK_CONVOY,
        Severity.WARNING,
        now,
        rooted,
        summary,
        (None, len(rows), settings.row_lock_wait, advice, relation),
    )


def _idle_blocker(
    snapshot: LockSnapshot, settings: LockSettings, now: datetime, rooted: _Rooted
) -> Finding | None:
    """The root is idle in transaction and a session waited on it past ``idle_blocker_wait``."""
    backend = snapshot.backends.get(rooted.root)
    if backend is None or backend.state not in IN_TRANSACTION:
        return None
    longest = _waited(rooted.waits[0], now)
    if longest < settings.idle_blocker_wait:
        return None
    relation = next((wait.relation for wait in rooted.waits if wait.relation), None)
    summary = (
        f"{_who(snapshot, rooted, now)} is idle in transaction while "
        f"{len(rooted.waits)} sessions wait on it{_on(relation)}, the longest for "
        f"{format_duration(longest)}"
    )
    advice = (
        "end its transaction (its client should COMMIT or ROLLBACK), or end its session; set "
        "idle_in_transaction_session_timeout for its role so a forgotten transaction ends alone"
    )
    return _finding(
        snapshot,
        FindingKind.IDLE_IN_TRANSACTION_BLOCKER,
        Severity.WARNING,
        now,
        rooted,
        summary,
        (None, len(rooted.waits), settings.idle_blocker_wait, advice, relation),
    )


def _on(relation: str | None) -> str:
    return f" of {one_line(relation)}" if relation else ""


def _who(snapshot: LockSnapshot, rooted: _Rooted, now: datetime) -> str:
    """The root in words: pid, application, state and transaction age; or
    the prepared transaction, its gid and age."""
    pid, prepared = rooted.root, rooted.prepared
    if prepared is not None:
        age = format_duration(prepared.age_seconds)
        return f"prepared transaction {one_line(prepared.gid)!r} (prepared {age} ago, no session)"
    backend = snapshot.backends.get(pid)
    if backend is None:
        return f"pid {pid}"
    xact = age_seconds(now, backend.xact_start)
    opened = f", transaction open {format_duration(xact)}" if xact is not None else ""
    name = f" ({one_line(backend.application_name)})" if backend.application_name else ""
    return f"pid {pid}{name}, {one_line(backend.state or 'state not seen')}{opened}"


# The facts a check adds: the strong wait, the queue's length (or the
# waiters'), the budget, the advice, the relation.
_Facts = tuple[WaitingFacts | None, int, float, str, str | None]


def _finding(
    snapshot: LockSnapshot,
    kind: FindingKind,
    severity: Severity,
    now: datetime,
    rooted: _Rooted,
    summary: str,
    facts: _Facts,
) -> Finding:
    waiting, queued, budget, advice, relation = facts
    backend = snapshot.backends.get(rooted.root)
    longest = _waited(rooted.waits[0], now)
    evidence = LockWaitEvidence(
        root=_root_facts(snapshot, rooted, now),
        relation=relation,
        waiting=waiting,
        queued=queued,
        waiter_count=len(rooted.waits),
        longest_wait_seconds=round(longest, 1),
        budget_seconds=budget,
        waiters=tuple(_waiting_facts(snapshot, w, now) for w in rooted.waits[:WAITERS_LISTED]),
        advice=advice,
    )
    since = rooted.waits[0].wait_start or now
    database = backend.database if backend is not None else None
    subject = Subject(database, f"pid {rooted.root}")
    if rooted.prepared is not None:
        subject = Subject(rooted.prepared.database, f"prepared {rooted.prepared.gid}")
    return Finding(
        kind,
        snapshot.target,
        subject,
        severity,
        since,
        summary,
        evidence,
    )


def _root_facts(snapshot: LockSnapshot, rooted: _Rooted, now: datetime) -> HolderFacts:
    pid, prepared = rooted.root, rooted.prepared
    backend = snapshot.backends.get(pid)
    return HolderFacts(
        **session_args(backend, pid, now),
        usename=backend.usename if backend else None,
        held_seconds=0.0,  # pg_locks does not date a grant
        mode="",
        xact_seconds=age_seconds(now, backend.xact_start) if backend else None,
        backend_start=backend.backend_start if backend else None,
        prepared=None
        if prepared is None
        else PreparedFacts(
            prepared.gid,
            prepared.owner,
            prepared.database,
            prepared.prepared,
            prepared.transaction,
        ),
    )


def _waiting_facts(snapshot: LockSnapshot, wait: LockWait, now: datetime) -> WaitingFacts:
    backend = snapshot.backends.get(wait.pid)
    visible = backend is not None and backend.visible
    return WaitingFacts(
        pid=wait.pid,
        application_name=backend.application_name if backend else None,
        client_addr=backend.client_addr if visible and backend else None,
        locktype=wait.locktype,
        mode=wait.mode,
        relation=wait.relation,
        wait_seconds=round(_waited(wait, now), 1),
        query=truncate(backend.query) if visible and backend else None,
        blocked_by=wait.blockers,
        backend_start=backend.backend_start if backend else None,
    )

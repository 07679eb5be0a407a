"""Findings grouped by root cause: the thing a person acts on.

Pure: one poll's findings (and its lock snapshot, for what a root holds) in,
one ``RootGroup`` per root out, every finding in exactly one of them. A root is
named by what stays put while the problem lasts (a session's pid and
backend_start, a prepared transaction's gid, a queue, a job, a lock, the
target), never by ranks, counts or pgbouncer's view, so the same problem gives
the same root poll after poll.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from lockwatch.model.evidence import (
    CapacityEvidence,
    HolderFacts,
    LockEvidence,
    LockHolderFacts,
    LockWaitEvidence,
    OverflowEvidence,
    PooledLockEvidence,
    QueueEvidence,
    QueueStallEvidence,
    SourceDownEvidence,
)
from lockwatch.model.findings import Family, Finding, FindingKind, Subject
from lockwatch.model.incidents import IncidentRoot, RootGroup, RootKind, RootLoad
from lockwatch.model.lock_waits import LockWait, roots_of
from lockwatch.model.locks import LockSnapshot


@dataclass(frozen=True, slots=True)
class _Grouped:
    root: IncidentRoot
    findings: tuple[Finding, ...]


Holder = HolderFacts | LockHolderFacts
FindingIdentity = tuple[str, str, Subject]
_HOLDING = frozenset({RootKind.SESSION, RootKind.POOLED_BACKEND, RootKind.PREPARED})


def holder_root(target: str, holder: Holder, *, pooled: bool = False) -> IncidentRoot:
    """The root a holder is: its prepared transaction, or its session."""
    prepared = holder.prepared if isinstance(holder, HolderFacts) else None
    if prepared is not None:
        return IncidentRoot(RootKind.PREPARED, target, gid=prepared.gid, database=prepared.database)
    return IncidentRoot(
        RootKind.POOLED_BACKEND if pooled else RootKind.SESSION,
        target,
        pid=holder.pid,
        backend_start=holder.backend_start,
        application_name=holder.application_name,
        client_addr=holder.client_addr,
        client_port=holder.client_port,
        client_hostname=holder.client_hostname,
        client_unknown=isinstance(holder, HolderFacts) and holder.pooled is not None,
    )


def _lock_root(finding: Finding) -> IncidentRoot:
    subject = finding.subject
    return IncidentRoot(RootKind.LOCK, finding.target, database=subject.database, lock=subject.lock)


def _own_root(finding: Finding) -> IncidentRoot | None:
    """The root a finding names by itself; None for a queue_growing, which
    joins its queue's stall when there is one."""
    evidence, target, subject = finding.evidence, finding.target, finding.subject
    family = finding.kind.family
    # Past the cap, or a wait on another locktype: the session it names.
    if isinstance(evidence, OverflowEvidence | LockWaitEvidence):
        pooled = finding.kind is FindingKind.LOCK_POOLED_SESSION
        holders = evidence.named_holders
        return holder_root(target, holders[0], pooled=pooled) if holders else _lock_root(finding)
    if isinstance(evidence, LockEvidence):
        if evidence.holder_pid is None or not evidence.holders:
            return _lock_root(finding)
        pooled = isinstance(evidence, PooledLockEvidence)
        return holder_root(target, evidence.named_holders[0], pooled=pooled)
    if family is Family.JOBS:
        return IncidentRoot(RootKind.JOB, target, job=subject.job)
    if family is Family.TARGETS:
        return _target_root(finding)
    return None  # a queue's: decided once the holders of this poll are known


def _target_root(finding: Finding) -> IncidentRoot:
    """A target's or a source's root: the target, or the session holding what
    a source's query timed out waiting on (its incident's; its backend_start
    is the one that session's lock findings know)."""
    evidence = finding.evidence
    if isinstance(evidence, SourceDownEvidence) and evidence.blocked_by:
        blocker = evidence.blocked_by[0]
        return IncidentRoot(
            RootKind.SESSION,
            finding.target,
            pid=blocker.pid,
            application_name=blocker.application_name,
        )
    return IncidentRoot(RootKind.TARGET, finding.target, source=finding.subject.source)


def _stall_root(
    finding: Finding,
    holders: dict[int, IncidentRoot],
    by_lock: dict[tuple[str | None, str | None], IncidentRoot],
) -> IncidentRoot:
    """A stalled queue's root: the holder its workers wait on (one already at
    the root of another finding first, then the root a finding about that lock
    blames, such as a prepared transaction), or the queue itself."""
    evidence = finding.evidence
    chain = evidence.lock if isinstance(evidence, QueueStallEvidence) else None
    named = () if chain is None else chain.holders
    for holder in named:
        if holder.pid in holders:
            return holders[holder.pid]
    if chain is not None and (chain.database, chain.lock) in by_lock:
        return by_lock[chain.database, chain.lock]
    sessions = [holder for holder in named if holder.pid != 0]  # pid 0: a prepared transaction
    if sessions:
        return holder_root(finding.target, sessions[0])
    return IncidentRoot(RootKind.QUEUE, finding.target, queue=finding.subject.queue)


def _kept_session(root: IncidentRoot, before: IncidentRoot | None) -> IncidentRoot:
    """The session a finding was told with last poll, when this poll names the
    same pid without knowing its backend_start (or last poll did not know it):
    a session seen once without it must not become another incident."""
    if before is None or _pid_key(root) is None or _pid_key(before) != root.pid:
        return root
    if root.backend_start is None or before.backend_start is None:
        return replace(root, backend_start=before.backend_start)
    return root


def _pid_key(root: IncidentRoot) -> int | None:
    is_session = root.kind in (RootKind.SESSION, RootKind.POOLED_BACKEND)
    return root.pid if is_session else None


def _settle_sessions(roots: list[IncidentRoot]) -> list[IncidentRoot]:
    """One root per pid in a poll (one pid is one backend at any one moment): a
    holder seen without its backend_start is the session seen with it, and a
    backend pgbouncer shows in one finding is a pooled backend in all."""
    best: dict[int, IncidentRoot] = {}
    pooled: set[int] = set()
    for root in roots:
        pid = _pid_key(root)
        if pid is None:
            continue
        if root.kind is RootKind.POOLED_BACKEND:
            pooled.add(pid)
        known = best.get(pid)
        if known is None or (known.backend_start is None and root.backend_start is not None):
            best[pid] = root
    settled = []
    for root in roots:
        pid = _pid_key(root)
        if pid is None:
            settled.append(root)
        else:
            kind = RootKind.POOLED_BACKEND if pid in pooled else RootKind.SESSION
            chosen = best[pid]
            settled.append(chosen if chosen.kind is kind else replace(chosen, kind=kind))
    return settled


def _queue_root(
    finding: Finding,
    root: IncidentRoot | None,
    stalls: dict[tuple[str, str | None], IncidentRoot],
    by_lock: dict[tuple[str | None, str | None], IncidentRoot],
    previous: Mapping[FindingIdentity, IncidentRoot],
) -> IncidentRoot:
    """A queue finding's root: its queue's stall's, else the holder of a lock
    its workers wait on (one a lock finding blames), else the holder it was
    told with last poll (a backlog outlasts the hold that caused it: it stays
    that incident's until it clears), else the queue itself."""
    if root is not None and root.kind is not RootKind.QUEUE:
        return root
    stall = stalls.get((finding.target, finding.subject.queue))
    if stall is not None and stall.kind is not RootKind.QUEUE:
        return stall
    evidence = finding.evidence
    # The evidence that tells its worker groups' lock waits.
    told = evidence.workers if isinstance(evidence, QueueEvidence | CapacityEvidence) else ()
    for worker in told:
        for wait in worker.waiting_on:
            if (wait.database, wait.lock) in by_lock:
                return by_lock[wait.database, wait.lock]
    before = previous.get(finding.identity)
    if before is not None and before.kind is not RootKind.QUEUE:
        return before
    return (
        root or stall or IncidentRoot(RootKind.QUEUE, finding.target, queue=finding.subject.queue)
    )


def _locks_about(evidence: LockEvidence) -> list[tuple[str | None, str | None]]:
    """(database, lock) of the keys a lock finding blames its holder for, as a
    queue's lock chain names them: its key (by name, when it has one) and,
    for a finding about a holder, the first of the holder's keys."""
    about: list[tuple[str | None, str | None]] = [
        (evidence.database, evidence.name or evidence.key)
    ]
    for listed in evidence.first_keys:
        database, _, key = listed.partition("/")
        about.append((database, key))
    return about


def group_findings(
    findings: Sequence[Finding], previous: Mapping[FindingIdentity, IncidentRoot] | None = None
) -> list[_Grouped]:
    """Every finding in exactly one group, one group per root, in the order
    of each root's first finding. ``previous``: the root each finding was told
    with last poll, which a queue's finding keeps while nothing else claims it."""
    own = [_own_root(finding) for finding in findings]
    holders = {pid: root for root in own if root is not None and (pid := _pid_key(root))}
    # The holders of the locks findings are about, for the queues' findings to join.
    by_lock = (
        {
            about: root
            for f, root in zip(findings, own, strict=True)
            if root is not None and root.kind in _HOLDING and isinstance(f.evidence, LockEvidence)
            for about in _locks_about(f.evidence)
        }
        if any(f.kind.family is Family.QUEUES for f in findings)
        else {}
    )
    roots: list[IncidentRoot | None] = [
        _stall_root(finding, holders, by_lock)
        if root is None and finding.kind is FindingKind.QUEUE_STALLED
        else root
        for finding, root in zip(findings, own, strict=True)
    ]
    stalls = {
        (finding.target, finding.subject.queue): root
        for finding, root in zip(findings, roots, strict=True)
        if finding.kind is FindingKind.QUEUE_STALLED and root is not None
    }
    before = previous or {}
    decided = [
        _kept_session(
            _queue_root(finding, root, stalls, by_lock, before), before.get(finding.identity)
        )
        for finding, root in zip(findings, roots, strict=True)
    ]
    groups: dict[tuple[str, ...], list[Finding]] = {}
    first: dict[tuple[str, ...], IncidentRoot] = {}
    for finding, root in zip(findings, _settle_sessions(decided), strict=True):
        identity = root.identity
        groups.setdefault(identity, []).append(finding)
        first.setdefault(identity, root)
    return [_Grouped(first[identity], tuple(members)) for identity, members in groups.items()]


def root_loads(
    roots: Iterable[IncidentRoot], snapshot: LockSnapshot | None
) -> dict[tuple[str, ...], RootLoad]:
    """What each holding root holds in ``snapshot`` and how many wait on it, by
    the root's identity; roots that hold nothing by nature are left out, and
    every root without a snapshot. The locks are summed up per holder once
    per poll's locks (``LockSummary.holdings``): not again while they stay.
    Its waiters are the sessions waiting on an advisory lock it holds and
    those whose chain of waits on locks of other kinds (relations, rows,
    transactions) ends at it: the whole queue behind a DDL it blocks."""
    wanted = [root for root in roots if root.kind in _HOLDING]
    if snapshot is None or not wanted:
        return {}
    holdings = snapshot.lock_summary().holdings()
    behind = _waiting_behind(snapshot.waits)
    loads = {}
    for root in wanted:
        who = (0, root.gid or "") if root.kind is RootKind.PREPARED else (root.pid or 0, "")
        count, locks = holdings.held.get(who, (0, ()))
        waiting = holdings.waiting.get(who, frozenset()) | behind.get(who, set())
        loads[root.identity] = RootLoad(locks_held=count, locks=locks, waiters=len(waiting))
    return loads


def _waiting_behind(waits: Sequence[LockWait]) -> dict[tuple[int, str], set[int]]:
    """The sessions waiting, at the end of their chains, on each session that
    waits on nothing, (pid, ""), and on each prepared transaction, (0, gid),
    as ``Holdings`` names holders."""
    behind: dict[tuple[int, str], set[int]] = {}
    for pid, root in roots_of(waits).items():
        if root not in (pid, 0):  # 0: a prepared transaction, told by its gid
            behind.setdefault((root, ""), set()).add(pid)
    for wait in waits:
        if wait.prepared is not None:
            behind.setdefault((0, wait.prepared.gid), set()).add(wait.pid)
    return behind


def waiters_in(findings: Iterable[Finding]) -> int:
    """Sessions waiting on the locks the findings are about, each counted once
    per lock: what the evidence says when there is no snapshot to count in."""
    seen: dict[tuple[str | None, str], int] = {}
    for finding in findings:
        evidence = finding.evidence
        if isinstance(evidence, LockEvidence):
            seen[(evidence.database, evidence.key)] = evidence.waiter_count
    return sum(seen.values())


def tell_incidents(
    findings: Sequence[Finding],
    snapshot: LockSnapshot | None,
    previous: Mapping[FindingIdentity, IncidentRoot] | None = None,
) -> list[RootGroup]:
    """One poll's findings as root causes, with what each holding root holds
    and who waits on it: what the incident book folds into incidents (and
    words, ``model/incident_text.py``). ``previous``: its ``finding_roots()``,
    the roots findings were told with last poll."""
    grouped = group_findings(findings, previous)
    loads = root_loads([group.root for group in grouped], snapshot)
    told = []
    for group in grouped:
        load = loads.get(group.root.identity)
        waiters = load.waiters if load is not None else waiters_in(group.findings)
        told.append(RootGroup(group.root, group.findings, waiters, load))
    return told

"""Advisory-lock detectors: long holds, convoys, orphans, unexpected holders and
missing leaders, read from one ``LockSnapshot``.

Pure: the clock comes in as ``now`` and the same input always gives the same
findings in the same order.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from lockwatch.detect.evidence import seconds_between
from lockwatch.detect.lock_groups import (
    Draft,
    Holder,
    KeyGroup,
    Waiter,
    and_more,
    budgets,
    doing,
    key_groups,
    lock_evidence,
    waiting_text,
    who,
)
from lockwatch.detect.pooler import pooled_session
from lockwatch.model.evidence import HolderFacts, OverflowEvidence
from lockwatch.model.findings import Finding, FindingKind, Related, Severity, Subject
from lockwatch.model.locks import LockSnapshot
from lockwatch.model.pooler import SHARED_POOL_MODES, PoolerSnapshot
from lockwatch.settings.locks import LockRole, LockSettings
from lockwatch.text import format_duration, one_line

# Findings of one kind reported one by one per target; the rest become one.
FINDINGS_PER_KIND = 100


OVERFLOW_SUBJECT = "(more locks)"


OVERFLOW_KEYS = 50  # keys listed in the evidence of the overflow finding


OVERFLOW_HOLDERS = 10  # holders named in the evidence of the overflow finding


def _held_too_long(
    group: KeyGroup, settings: LockSettings, snapshot: LockSnapshot, now: datetime
) -> Draft | None:
    budget, _ = budgets(group, settings)
    holder = max(group.holders, key=lambda h: (h.held, -h.lock.pid), default=None)
    if budget is None or holder is None or holder.held <= budget:
        return None
    assert holder.lock.first_seen is not None  # a positive hold has a start
    others = sum(1 for h in group.holders if h.held > budget) - 1
    summary = (
        f"lock {group.label()} in {one_line(group.database)} held "
        f"{format_duration(holder.held)} by {who(holder)}{and_more(others)}, {doing(holder)}; "
        f"budget {format_duration(budget)}{waiting_text(group)}"
    )
    return Draft(
        FindingKind.LOCK_HELD_TOO_LONG,
        group,
        Severity.CRITICAL if group.waiters else Severity.WARNING,
        holder.lock.first_seen + timedelta(seconds=budget),
        summary,
        lock_evidence(group, settings, snapshot, now, holder),
    )


def _convoy(
    group: KeyGroup, settings: LockSettings, snapshot: LockSnapshot, now: datetime
) -> Draft | None:
    longest = group.longest_waiter
    if (
        longest is None
        or len(group.waiters) < settings.convoy_waiters
        or longest.waited < settings.convoy_wait
    ):
        return None
    holder = max(
        group.holders, key=lambda h: (h.waits, h.idle or 0.0, h.held, -h.lock.pid), default=None
    )
    if holder is None:
        holder_text = "no holder seen"
    else:
        others = len(group.holders) - 1
        holder_text = f"holder {who(holder, addr=False)}{and_more(others)} {doing(holder)}"
    summary = (
        f"{len(group.waiters)} sessions wait on lock {group.label()} in "
        f"{one_line(group.database)}, longest {format_duration(longest.waited)}; {holder_text}"
    )
    starts = [w.started for w in group.waiters if w.started is not None]
    return Draft(
        FindingKind.LOCK_CONVOY,
        group,
        Severity.CRITICAL,
        min(starts, default=now),
        summary,
        lock_evidence(group, settings, snapshot, now, holder),
    )


def orphaned_since(holder: Holder, orphan_after: float) -> datetime | None:
    """When the holder's lock became an orphan, or None if it is not one.

    An orphan is held by a session that has left it behind: idle (running no
    SQL) past ``orphan_after``, or held past ``orphan_after`` by a session that
    has started other statements since lockwatch first saw it, so that the
    statement that took it is long finished (a pooled client that the pool
    keeps lending to other work, never idle for long). Both only grow truer
    while the same session holds the lock: it fires once per hold.
    """
    after = timedelta(seconds=orphan_after)
    first_seen = holder.lock.first_seen
    if holder.lock.prepared is not None:
        # A prepared transaction runs no SQL, ever: left behind since its prepare.
        if first_seen is not None and holder.held > orphan_after:
            return first_seen + after
        return None
    backend = holder.backend
    if backend is None:
        return None
    if holder.idle is not None and holder.idle > orphan_after and backend.state_change:
        return backend.state_change + after
    if (
        first_seen is not None
        and holder.held > orphan_after
        and backend.query_start is not None
        and backend.query_start > first_seen
    ):
        return first_seen + after
    return None


def _orphaned(
    group: KeyGroup, settings: LockSettings, snapshot: LockSnapshot, now: datetime
) -> Draft | None:
    _, orphan_after = budgets(group, settings)
    if orphan_after is None:
        return None
    orphans = [(h, since) for h in group.holders if (since := orphaned_since(h, orphan_after))]
    if not orphans:
        return None
    holder, since = min(orphans, key=lambda pair: (pair[1], -pair[0].lock.pid))
    head = (
        f"lock {group.label()} in {one_line(group.database)} held by {who(holder)}"
        f"{and_more(len(orphans) - 1)}"
    )
    backend = holder.backend
    if holder.lock.prepared is not None:
        # It survives restarts of the server: the worst orphan of all.
        severity = Severity.CRITICAL
        state = f"{doing(holder)}; it survives restarts until COMMIT PREPARED or ROLLBACK PREPARED"
    else:
        assert backend is not None  # an orphan without a prepared transaction has a session
        severity = Severity.CRITICAL if group.waiters else Severity.WARNING
        if holder.idle is not None and holder.idle > orphan_after:
            state = f'{one_line(backend.state)} {format_duration(holder.idle)} since "{one_line(backend.query)}"'
        else:
            state = (
                f"held {format_duration(holder.held)} while its session runs other statements "
                f'(now {doing(holder)}, last "{one_line(backend.query)}")'
            )
    return Draft(
        FindingKind.LOCK_ORPHANED,
        group,
        severity,
        since,
        f"{head}, {state}{waiting_text(group)}",
        lock_evidence(group, settings, snapshot, now, holder),
    )


def _unexpected_holder(
    group: KeyGroup, settings: LockSettings, snapshot: LockSnapshot, now: datetime
) -> Draft | None:
    named = group.named
    if named is None or not named.allowed.restricted:
        return None
    # A holder whose session lockwatch did not see cannot be judged either way.
    strangers = [
        h
        for h in group.holders
        if h.backend is not None
        and not named.allowed.allows(h.backend.application_name, h.backend.client_addr)
    ]
    if not strangers:
        return None
    holder = min(strangers, key=lambda h: (h.lock.first_seen or now, h.lock.pid))
    evidence = lock_evidence(group, settings, snapshot, now, holder)
    allowed = ", ".join(
        [one_line(a) for a in evidence.allowed_applications]
        + [one_line(a) for a in evidence.allowed_addresses]
    )
    summary = (
        f"lock {group.label()} in {one_line(group.database)} held by {who(holder)}"
        f"{and_more(len(strangers) - 1)}, not an allowed holder (allowed: {allowed})"
    )
    return Draft(
        FindingKind.LOCK_UNEXPECTED_HOLDER,
        group,
        Severity.CRITICAL,
        holder.lock.first_seen or now,
        summary,
        evidence,
    )


def _leaders_missing(
    snapshot: LockSnapshot, settings: LockSettings, now: datetime
) -> Iterable[Draft]:
    for named in settings.named:
        if named.role is not LockRole.LEADER or named.ignore:
            continue
        rows = [
            lock
            for lock in snapshot.locks
            if lock.key == named.key and (named.database is None or lock.database == named.database)
        ]
        if any(lock.granted for lock in rows):
            continue
        waiters = [
            Waiter(
                lock,
                snapshot.backends.get(lock.pid),
                seconds_between(now, lock.wait_start or lock.first_seen),
            )
            for lock in rows
        ]
        waiters.sort(key=lambda w: (-w.waited, w.lock.pid))
        group = KeyGroup(named.database, named.key, named, (), tuple(waiters))
        where = f"in {one_line(named.database)}" if named.database else "in any database"
        yield Draft(
            FindingKind.LEADER_LOCK_MISSING,
            group,
            Severity.CRITICAL,
            now,
            f"leader lock {group.label()} is held by nobody {where}{waiting_text(group)}",
            lock_evidence(group, settings, snapshot, now, None),
        )


_CHECKS = (_held_too_long, _convoy, _orphaned, _unexpected_holder)


def detect_locks(
    snapshot: LockSnapshot,
    settings: LockSettings,
    now: datetime,
    pooler: PoolerSnapshot | None = None,
) -> list[Finding]:
    """Every advisory-lock problem visible in ``snapshot`` at ``now``; with the
    pooler's view of the same server, also session locks on pooled backends.

    At most one finding per kind and subject, ordered by kind, database and key;
    findings about the same subject name each other in ``related``.
    """
    pooled: frozenset[int] = frozenset()
    if pooler is not None:
        pooled = frozenset(
            server.remote_pid
            for server in pooler.servers
            if server.remote_pid is not None and pooler.pool_mode(server) in SHARED_POOL_MODES
        )
    groups = key_groups(snapshot, settings, now, pooled)
    drafts = [
        draft
        for group in groups
        for check in _CHECKS
        if (draft := check(group, settings, snapshot, now)) is not None
    ]
    if pooler is not None:
        drafts.extend(
            draft
            for group in groups
            if (draft := pooled_session(group, settings, snapshot, now, pooler)) is not None
        )
    drafts.extend(_leaders_missing(snapshot, settings, now))
    drafts, overflow = _capped(drafts)
    drafts.sort(key=lambda d: (d.kind.value, d.group.database or "", d.group.key))
    kinds: dict[Subject, set[FindingKind]] = {}
    for draft in drafts:
        kinds.setdefault(draft.group.subject, set()).add(draft.kind)
    findings = [
        Finding(
            draft.kind,
            snapshot.target,
            draft.group.subject,
            draft.severity,
            draft.since,
            draft.summary,
            draft.evidence,
            tuple(
                Related(kind, snapshot.target, draft.group.subject)
                for kind in sorted(kinds[draft.group.subject] - {draft.kind})
            ),
        )
        for draft in drafts
    ]
    findings.extend(_overflow_finding(snapshot.target, rest) for rest in overflow)
    return findings


def _capped(drafts: list[Draft]) -> tuple[list[Draft], list[list[Draft]]]:
    """At most FINDINGS_PER_KIND findings of one kind: named locks first, then
    the oldest. The rest of each kind come back apart, to be told as one
    finding: 50,000 orphaned locks are one problem to a person, and 50,000 log
    lines and messages would bury it.

    The rank uses only what stays put while a lock is held (named, since, key),
    never the severity: a finding turning critical past the cap would push one
    reported on its own into the overflow, and that one would be told resolved
    while its lock is still held. A critical one past the cap makes the overflow
    finding critical."""
    by_kind: dict[FindingKind, list[Draft]] = {}
    for draft in drafts:
        by_kind.setdefault(draft.kind, []).append(draft)
    kept: list[Draft] = []
    overflow: list[list[Draft]] = []
    for kind_drafts in by_kind.values():
        kind_drafts.sort(
            key=lambda d: (
                d.group.named is None,
                d.since,
                d.group.key,
            )
        )
        kept.extend(kind_drafts[:FINDINGS_PER_KIND])
        if len(kind_drafts) > FINDINGS_PER_KIND:
            overflow.append(kind_drafts[FINDINGS_PER_KIND:])
    return kept, overflow


def _overflow_finding(target: str, rest: list[Draft]) -> Finding:
    """The findings of one kind past the cap, as one: how many, since when, which keys."""
    kind = rest[0].kind
    keys = [f"{d.group.database or '*'}/{d.group.label()}" for d in rest]
    critical = any(d.severity is Severity.CRITICAL for d in rest)
    return Finding(
        kind,
        target,
        Subject(lock=OVERFLOW_SUBJECT),
        Severity.CRITICAL if critical else Severity.WARNING,
        min(d.since for d in rest),
        f"{len(rest)} more advisory locks with {kind.value} beyond the "
        f"{FINDINGS_PER_KIND} reported one by one, e.g. {', '.join(keys[:5])}",
        OverflowEvidence(
            count=len(rest),
            locks=tuple(keys[:OVERFLOW_KEYS]),
            cap=FINDINGS_PER_KIND,
            holders=_blamed_holders(rest),
        ),
    )


def _blamed_holders(rest: list[Draft]) -> tuple[HolderFacts, ...]:
    """The holders the findings past the cap blame, the most blamed first (then
    by pid): their incidents are where the overflow belongs."""
    blamed: dict[tuple[int, str], list[HolderFacts]] = {}
    for draft in rest:
        evidence = draft.evidence
        for holder in evidence.named_holders[:1] if evidence.holder_pid is not None else ():
            gid = "" if holder.prepared is None else holder.prepared.gid
            blamed.setdefault((holder.pid, gid), []).append(holder)
    order = sorted(blamed, key=lambda who: (-len(blamed[who]), who))
    return tuple(blamed[who][0] for who in order[:OVERFLOW_HOLDERS])

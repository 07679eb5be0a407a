"""Advisory-lock detectors: long holds, convoys, orphans, unexpected holders and
missing leaders, read from one ``LockSnapshot``.

Pure: the clock comes in as ``now`` and the same input always gives the same
findings in the same order.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import NamedTuple

from lockwatch.detect.evidence import seconds_between
from lockwatch.detect.key_groups import Alike, RowPlan, key_groups
from lockwatch.detect.lock_groups import (
    Draft,
    Histories,
    Holder,
    KeyGroup,
    Waiter,
    and_more,
    budgets,
    doing,
    history_facts,
    lock_evidence,
    waited_text,
    waiting_text,
    who,
)
from lockwatch.detect.lock_holders import KEYS_LISTED, HolderTally, told_findings
from lockwatch.detect.migrations import migration_lock, migration_running
from lockwatch.detect.pooler import known_pooled, pooled_session, unknown_pooling
from lockwatch.model.catalogue import HeldLocks
from lockwatch.model.evidence import ChurnEvidence, LockEvidence
from lockwatch.model.findings import Finding, FindingKind, Severity
from lockwatch.model.keepalive import ServerSettings
from lockwatch.model.locks import Backend, LockSnapshot
from lockwatch.model.pooler import PooledBackend, PoolerSnapshot
from lockwatch.settings.locks import LockRole, LockSettings, NamedLock
from lockwatch.text import format_duration, format_short_duration, one_line


def _held_too_long(
    group: KeyGroup, settings: LockSettings, snapshot: LockSnapshot, now: datetime
) -> Draft | None:
    budget, _ = budgets(group, settings)
    holder = max(group.holders, key=lambda h: (h.held, -h.lock.pid), default=None)
    if budget is None or holder is None or holder.held <= budget:
        return None
    if migration_lock(group, settings) is not None:
        return None  # a long migration is its own finding (migration_running)
    assert holder.lock.first_seen is not None  # a positive hold has a start

    def summary() -> str:
        others = sum(1 for h in group.holders if h.held > budget) - 1
        history = history_facts(group, holder)
        if history is not None and history.learned and budget == group.learned:
            budget_text = f"learned budget {format_short_duration(budget)} ({history.text})"
        else:
            budget_text = f"budget {format_duration(budget)}"
        return (
            f"lock {group.label()} in {one_line(group.database)} held "
            f"{format_duration(holder.held)} by {who(holder)}{and_more(others)}, "
            f"{doing(holder)}; {budget_text}{waiting_text(group)}"
        )

    return Draft(
        FindingKind.LOCK_HELD_TOO_LONG,
        group,
        Severity.CRITICAL if group.waiters else Severity.WARNING,
        holder.lock.first_seen + timedelta(seconds=budget),
        summary,
        lambda: lock_evidence(group, settings, snapshot, now, holder),
        holder=holder,
    )


def waited_behind_holders(group: KeyGroup, longest: Waiter) -> float:
    """How long ``longest``, the key's longest waiter, has waited behind its
    holders of now.

    A queue outlives the holder it formed behind: when that holder lets go,
    the next in line takes the key with the others' waits already long. Those
    waits are not the new holder's doing, so they count only from when
    lockwatch first saw the longest-held of the holders hold it (at most one
    poll after it took the key). With no holder seen, the waits count whole.
    """
    seen = [h.held for h in group.holders if h.lock.first_seen is not None]
    return min(longest.waited, max(seen)) if seen else longest.waited


def _convoy(
    group: KeyGroup, settings: LockSettings, snapshot: LockSnapshot, now: datetime
) -> Draft | None:
    longest = group.longest_waiter
    if (
        longest is None
        or len(group.waiters) < settings.convoy_waiters
        or waited_behind_holders(group, longest) < settings.convoy_wait
    ):
        return None
    holder = max(
        group.holders, key=lambda h: (h.waits, h.idle or 0.0, h.held, -h.lock.pid), default=None
    )

    def summary() -> str:
        if holder is None:
            holder_text = "no holder seen"
        else:
            others = len(group.holders) - 1
            holder_text = f"holder {who(holder, addr=False)}{and_more(others)} {doing(holder)}"
        return (
            f"{len(group.waiters)} sessions wait on lock {group.label()} in "
            f"{one_line(group.database)}, {waited_text(longest)}; "
            f"{holder_text}"
        )

    starts = [w.started for w in group.waiters if w.started is not None]
    return Draft(
        FindingKind.LOCK_CONVOY,
        group,
        Severity.CRITICAL,
        min(starts, default=now),
        summary,
        lambda: lock_evidence(group, settings, snapshot, now, holder),
        holder=holder,
    )


def orphaned_since(
    holder: Holder, orphan_after: float, *, own_work: bool = False
) -> datetime | None:
    """When the holder's lock became an orphan, or None if it is not one.

    An orphan is held by a session that has left it behind: idle (running no
    SQL) past ``orphan_after``, or held past ``orphan_after`` by a session that
    has started other statements since lockwatch first saw it, so that the
    statement that took it is long finished (a pooled client that the pool
    keeps lending to other work, never idle for long). Both only grow truer
    while the same session holds the lock: it fires once per hold. With
    ``own_work`` (a migration's lock) only idleness makes an orphan.
    """
    after = timedelta(seconds=orphan_after)
    first_seen = holder.lock.first_seen
    if holder.lock.prepared is not None:
        # A prepared transaction runs no SQL, ever: left behind since its prepare.
        if first_seen is not None and holder.held > orphan_after:
            return first_seen + after
        return None
    backend = holder.backend
    if backend is None or not backend.visible:
        # Idle since when, running what: nothing lockwatch's role may see.
        return None
    if holder.idle is not None and holder.idle > orphan_after and backend.state_change:
        return backend.state_change + after
    if (
        not own_work
        and first_seen is not None
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
    own_work = migration_lock(group, settings) is not None
    orphan = functools.partial(orphaned_since, orphan_after=orphan_after, own_work=own_work)
    orphans = [(h, since) for h in group.holders if (since := orphan(h))]
    if not orphans:
        return None
    holder, since = min(orphans, key=lambda pair: (pair[1], -pair[0].lock.pid))
    # A prepared transaction survives restarts of the server: the worst orphan of all.
    prepared = holder.lock.prepared is not None
    severity = Severity.CRITICAL if prepared or group.waiters else Severity.WARNING

    def summary() -> str:
        head = (
            f"lock {group.label()} in {one_line(group.database)} held by {who(holder)}"
            f"{and_more(len(orphans) - 1)}"
        )
        backend = holder.backend
        if prepared:
            state = (
                f"{doing(holder)}; it survives restarts until COMMIT PREPARED or ROLLBACK PREPARED"
            )
        else:
            assert backend is not None  # an orphan without a prepared transaction has a session
            if holder.idle is not None and holder.idle > orphan_after:
                state = (
                    f"{one_line(backend.state)} {format_duration(holder.idle)} "
                    f'since "{one_line(backend.query)}"'
                )
            else:
                state = (
                    f"held {format_duration(holder.held)} while its session runs other "
                    f'statements (now {doing(holder)}, last "{one_line(backend.query)}")'
                )
        return f"{head}, {state}{waiting_text(group)}"

    return Draft(
        FindingKind.LOCK_ORPHANED,
        group,
        severity,
        since,
        summary,
        lambda: lock_evidence(group, settings, snapshot, now, holder),
        holder=holder,
    )


def _stranger(named: NamedLock, backend: Backend) -> bool:
    allowed = named.allowed
    if not backend.visible:
        # Its address is hidden from lockwatch's role (NULL, as a local socket's
        # would be): only its application_name, which is shown, can tell.
        return not allowed.allows_application(backend.application_name)
    return not allowed.allows(backend.application_name, backend.client_addr)


def _unexpected_holder(
    group: KeyGroup, settings: LockSettings, snapshot: LockSnapshot, now: datetime
) -> Draft | None:
    named = group.named
    if named is None or not named.allowed.restricted:
        return None
    # A holder whose session lockwatch did not see cannot be judged either way;
    # nor can one on a pooled backend, whose name and address are the pool's
    # last client's (lock_pooled_session tells of it).
    strangers = [
        h
        for h in group.holders
        if h.backend is not None and h.pooled is None and _stranger(named, h.backend)
    ]
    if not strangers:
        return None
    holder = min(strangers, key=lambda h: (h.lock.first_seen or now, h.lock.pid))

    def evidence() -> LockEvidence:
        return lock_evidence(group, settings, snapshot, now, holder)

    def summary() -> str:
        facts = evidence()
        allowed = ", ".join(
            [one_line(a) for a in facts.allowed_applications]
            + [one_line(a) for a in facts.allowed_addresses]
        )
        return (
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
        holder=holder,
    )


def _leaders_missing(
    snapshot: LockSnapshot, settings: LockSettings, now: datetime
) -> Iterable[Draft]:
    for named in settings.named:
        if named.role is LockRole.LEADER and not named.ignore:
            draft = _leader_missing(named, snapshot, settings, now)
            if draft is not None:
                yield draft


def _leader_missing(
    named: NamedLock, snapshot: LockSnapshot, settings: LockSettings, now: datetime
) -> Draft | None:
    rows = [
        lock
        for lock in snapshot.locks
        if lock.key == named.key and (named.database is None or lock.database == named.database)
    ]
    if any(lock.granted for lock in rows):
        return None
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
    return Draft(
        FindingKind.LEADER_LOCK_MISSING,
        group,
        Severity.CRITICAL,
        now,
        lambda: f"leader lock {group.label()} is held by nobody {where}{waiting_text(group)}",
        lambda: lock_evidence(group, settings, snapshot, now, None),
    )


def _leaders_churning(
    groups: list[KeyGroup],
    snapshot: LockSnapshot,
    settings: LockSettings,
    history: Histories,
    now: datetime,
) -> Iterable[Draft]:
    """Leader locks whose holder changed leader_churn_changes times within the
    window: a pool recycling the leader's connection, leaders fighting. Told
    from the holder changes the history saw, so it holds even while no poll
    sees the lock free (and while it is free for a moment)."""
    window = settings.leader_churn_window
    present = {(g.database, g.key): g for g in groups if g.leader}
    for named in settings.named:
        if named.role is not LockRole.LEADER or named.ignore:
            continue
        for (database, key), past in sorted(history.items()):
            if not named.matches(database, key):
                continue
            recent = [t for t in past.holder_changes if (now - t).total_seconds() <= window]
            if len(recent) < settings.leader_churn_changes:
                continue
            group = present.get((database, key)) or KeyGroup(database, key, named, (), (), past)
            holder = min(group.holders, key=lambda h: (h.held, h.lock.pid), default=None)
            evidence = ChurnEvidence.of(
                lock_evidence(group, settings, snapshot, now, holder),
                window,
                tuple(t.isoformat() for t in recent),
            )
            summary = (
                f"leader lock {group.label()} in {one_line(database)} changed hands "
                f"{len(recent)} times in {format_duration(window)} "
                f"({evidence.changes_per_hour:g}/h), last "
                f"{format_duration((now - recent[-1]).total_seconds())} ago"
                + (f" to {who(holder)}" if holder is not None else "")
            )
            # Few leaders churn: their text and facts are made at once, and bound here.
            yield Draft(
                FindingKind.LEADER_LOCK_CHURN,
                group,
                Severity.WARNING,
                recent[0],
                functools.partial(str, summary),
                functools.partial(_made, evidence),
                holder=holder,
            )


def _made(evidence: LockEvidence) -> LockEvidence:
    """Facts made already, as a draft takes them (made when asked)."""
    return evidence


_CHECKS = (_held_too_long, _convoy, _orphaned, _unexpected_holder, migration_running)


def detect_locks(
    snapshot: LockSnapshot,
    settings: LockSettings,
    now: datetime,
    pooler: PoolerSnapshot | None = None,
    *,
    history: Histories | None = None,
    timeouts: ServerSettings | None = None,
    inferred: Mapping[int, str] | None = None,
    held: HeldLocks | None = None,
    through_pooler: bool = False,
    plan: RowPlan | None = None,
) -> list[Finding]:
    """Every advisory-lock problem visible in ``snapshot`` at ``now``; with the
    pooler's view of the same server (or the backends ``inferred`` pooled,
    pid -> how), also session locks on pooled backends; with the keys'
    history, learned budgets and leader churn; with the server's timeouts
    (and its roles' and databases'), how long an orphan can live there; with the locks the target's queue
    libraries hold on purpose (``held``), those named and never held too long
    nor orphaned. Without the pooler's view, when clients may come through a
    pooler (``settings.clients_through_pooler``, or lockwatch's own session
    goes ``through_pooler``), a session lock's holder not found pooled is
    named by its backend alone: its client is unknown. ``plan``: the rows as
    sorted into keys at the last poll (used again while they stay the same;
    kept for the next).

    At most one finding per kind and subject (a holder, or a key the config
    names), ordered by kind, database and key (a holder's longest hold's);
    findings about the same subject name each other in ``related``.
    """
    # With pgbouncer's console read, SHOW SERVERS decides: no guess is used.
    inferred = inferred if pooler is None else None
    pooled = {pid: PooledBackend(None, inferred=True) for pid in inferred or {}}
    pooled.update(known_pooled(pooler, snapshot))
    if pooler is None and (through_pooler or settings.clients_through_pooler):
        pooled.update(unknown_pooling(snapshot, pooled))
    tallies: dict[FindingKind, HolderTally] = {}
    own: list[Draft] = []  # about a named key, or blaming nobody: a finding per key
    leaders: list[KeyGroup] = []
    pooling = _Pooling(pooler, pooled, inferred)
    judged = _drafts(snapshot, settings, now, pooling, (history, held, plan), leaders)
    for draft, alike in judged:
        if draft.group.named is None and draft.holder is not None:
            tally = tallies.get(draft.kind) or tallies.setdefault(draft.kind, HolderTally())
            tally.add(draft, alike)
        else:
            assert alike is None  # keys alike are unnamed, and held
            own.append(draft)
    if history:
        own.extend(_leaders_churning(leaders, snapshot, settings, history, now))
    return told_findings(snapshot.target, own, tallies, timeouts)


class _Pooling(NamedTuple):
    """What tells a pooled backend: pgbouncer's view, the backends known or
    inferred pooled (by pid), and how each inferred one showed it."""

    pooler: PoolerSnapshot | None
    pooled: Mapping[int, PooledBackend]
    inferred: Mapping[int, str] | None


def _drafts(
    snapshot: LockSnapshot,
    settings: LockSettings,
    now: datetime,
    pooling: _Pooling,
    known: tuple[Histories | None, HeldLocks | None, RowPlan | None],
    leaders: list[KeyGroup],
) -> Iterator[tuple[Draft, Alike | None]]:
    """Every check's drafts, one key at a time: a key is let go once its
    drafts are tallied, not held with 49,999 others. A draft of keys held
    alike comes again with the ``Alike`` whose keys, never built, it stands for.
    ``pooling``: pgbouncer's view, the pooled backends, those inferred so;
    ``known``: the keys' history and the locks held on purpose; the groups of
    leader locks are put in ``leaders`` (for churn)."""
    history, held, plan = known
    groups_made = key_groups(
        snapshot,
        settings,
        now,
        pooling.pooled,
        history,
        built=KEYS_LISTED,
        on_purpose=held,
        plan=plan,
    )
    for item in groups_made:
        group = item.group if isinstance(item, Alike) else item
        if group.leader:
            leaders.append(group)
        drafts = list(_checked(group, settings, snapshot, now, pooling))
        yield from ((draft, None) for draft in drafts)
        if isinstance(item, Alike):
            # The rest are judged as the one built was, with larger keys.
            yield from ((draft, item) for draft in drafts)
    yield from ((draft, None) for draft in _leaders_missing(snapshot, settings, now))


def _checked(
    group: KeyGroup,
    settings: LockSettings,
    snapshot: LockSnapshot,
    now: datetime,
    pooling: _Pooling,
) -> Iterator[Draft]:
    for check in _CHECKS:
        draft = check(group, settings, snapshot, now)
        if draft is not None:
            yield draft
    if pooling.pooled:
        draft = pooled_session(group, settings, snapshot, now, pooling.pooler, pooling.inferred)
        if draft is not None:
            yield draft

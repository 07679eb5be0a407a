"""Advisory-lock detectors: long holds, convoys, orphans, unexpected holders and
missing leaders, read from one ``LockSnapshot``.

Pure: the clock comes in as ``now`` and the same input always gives the same
findings in the same order.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from lockwatch.detect.evidence import age_seconds, backend_facts, blocking_chain, seconds_between
from lockwatch.model.findings import Finding, FindingKind, Severity, Subject
from lockwatch.model.locks import AdvisoryLock, Backend, LockKey, LockSnapshot
from lockwatch.model.pooler import SHARED_POOL_MODES, PoolerConnection, PoolerSnapshot
from lockwatch.settings.locks import LockRole, LockSettings, NamedLock
from lockwatch.text import format_duration, one_line

IDLE_STATES = frozenset({"idle", "idle in transaction", "idle in transaction (aborted)"})


# Findings of one kind reported one by one per target; the rest become one.
FINDINGS_PER_KIND = 100


OVERFLOW_SUBJECT = "(more locks)"


OVERFLOW_KEYS = 50  # keys listed in the evidence of the overflow finding


@dataclass(frozen=True, slots=True)
class _Holder:
    lock: AdvisoryLock
    backend: Backend | None
    held: float
    idle: float | None  # seconds idle, None unless the backend is in an idle state

    @property
    def waits(self) -> bool:
        return self.backend is not None and (
            self.backend.waiting_on_lock or bool(self.backend.blocked_by)
        )


@dataclass(frozen=True, slots=True)
class _Waiter:
    lock: AdvisoryLock
    backend: Backend | None
    waited: float

    @property
    def started(self) -> datetime | None:
        return self.lock.wait_start or self.lock.first_seen


@dataclass(frozen=True, slots=True)
class _Group:
    """Every row of one (database, key), with what the settings say about it."""

    database: str | None  # None only for a leader lock meant in every database
    key: LockKey
    named: NamedLock | None
    holders: tuple[_Holder, ...]
    waiters: tuple[_Waiter, ...]

    @property
    def subject(self) -> Subject:
        return Subject(self.database, self.named.name if self.named else self.key.render())

    @property
    def leader(self) -> bool:
        return self.named is not None and self.named.role is LockRole.LEADER

    @property
    def longest_waiter(self) -> _Waiter | None:
        return max(self.waiters, key=lambda w: (w.waited, -w.lock.pid), default=None)

    def label(self) -> str:
        """``webhook-delivery (42)`` for a named lock, ``42`` otherwise."""
        if self.named is None:
            return self.key.render()
        return f"{one_line(self.named.name)} ({self.key.render()})"


@dataclass(frozen=True, slots=True)
class _Draft:
    """A finding before it knows its target and its related findings."""

    kind: FindingKind
    group: _Group
    severity: Severity
    since: datetime
    summary: str
    evidence: dict[str, Any]


def _budgets(group: _Group, settings: LockSettings) -> tuple[float | None, float | None]:
    """(max_hold, orphan_after) for the group; None switches the check off.
    A leader is meant to be held for ever, so it only gets the budgets it names."""
    named = group.named
    if named is not None and named.max_hold is not None:
        max_hold: float | None = named.max_hold
    else:
        max_hold = None if group.leader else settings.max_hold
    if named is not None and named.orphan_after is not None:
        orphan_after: float | None = named.orphan_after
    else:
        orphan_after = None if group.leader else settings.orphan_after
    return max_hold, orphan_after


def _who(holder: _Holder, *, addr: bool = True) -> str:
    """``pid 1234 (webhook-worker-1 from 10.0.0.5)``"""
    backend = holder.backend
    if backend is None:
        return f"pid {holder.lock.pid}"
    app = one_line(backend.application_name) or "no application_name"
    if addr:
        where = one_line(backend.client_addr) if backend.client_addr else "local socket"
        return f"pid {holder.lock.pid} ({app} from {where})"
    return f"pid {holder.lock.pid} ({app})"


def _doing(holder: _Holder) -> str:
    """What the holder's session is up to, for a summary: ``idle 330s``."""
    backend = holder.backend
    if backend is None:
        return "session not seen"
    if holder.waits:
        blockers = ",".join(str(p) for p in backend.blocked_by) or "?"
        return f"itself waiting on pid {blockers}"
    if holder.idle is not None:
        return f"{one_line(backend.state)} {format_duration(holder.idle)}"
    return one_line(backend.state or "state unknown")


def _more(count: int) -> str:
    return f" and {count} more" if count else ""


def _waiting(group: _Group) -> str:
    return f"; {len(group.waiters)} waiting" if group.waiters else ""


def _holder_facts(holder: _Holder, now: datetime) -> dict[str, Any]:
    backend = holder.backend
    return {
        **backend_facts(backend, holder.lock.pid, now),
        "usename": backend.usename if backend else None,
        "held_seconds": round(holder.held, 1),
        "mode": holder.lock.mode,
        "xact_seconds": age_seconds(now, backend.xact_start) if backend else None,
    }


def _waiter_facts(waiter: _Waiter) -> dict[str, Any]:
    backend = waiter.backend
    return {
        "pid": waiter.lock.pid,
        "application_name": backend.application_name if backend else None,
        "client_addr": backend.client_addr if backend else None,
        "state": backend.state if backend else None,
        "wait_seconds": round(waiter.waited, 1),
        "blocked_by": list(backend.blocked_by) if backend else [],
    }


def _evidence(
    group: _Group,
    settings: LockSettings,
    snapshot: LockSnapshot,
    now: datetime,
    holder: _Holder | None,
) -> dict[str, Any]:
    max_hold, orphan_after = _budgets(group, settings)
    allowed = group.named.allowed if group.named else None
    longest = group.longest_waiter
    chain_from: int | None = None
    if longest is not None:
        chain_from = longest.lock.pid
    elif holder is not None and holder.waits:
        chain_from = holder.lock.pid
    addresses: list[str] = []
    if allowed is not None:
        addresses = [str(n) for n in allowed.networks] + (["local"] if allowed.local else [])
    return {
        "key": group.key.render(),
        "name": group.named.name if group.named else None,
        "role": group.named.role.value if group.named else None,
        "database": group.database,
        "holder_pid": holder.lock.pid if holder else None,
        "holders": [_holder_facts(h, now) for h in group.holders],
        "waiters": [_waiter_facts(w) for w in group.waiters],
        "waiter_count": len(group.waiters),
        "longest_wait_seconds": round(longest.waited, 1) if longest else None,
        "max_hold_seconds": max_hold,
        "orphan_after_seconds": orphan_after,
        "allowed_applications": list(allowed.applications) if allowed else [],
        "allowed_addresses": addresses,
        "chain": [] if chain_from is None else blocking_chain(snapshot, chain_from, now),
    }


def _before(now: datetime, seconds: float) -> datetime:
    """``now`` less ``seconds``, and a millisecond later: a cut-off that is never
    stricter than the checks' own arithmetic in seconds."""
    try:
        return now - timedelta(seconds=seconds) + timedelta(milliseconds=1)
    except OverflowError:
        return datetime.min.replace(tzinfo=now.tzinfo)


def _worth_checking(
    snapshot: LockSnapshot, settings: LockSettings, now: datetime, pooled: frozenset[int]
) -> list[AdvisoryLock]:
    """The rows of every key that could raise a finding.

    In a busy database most keys are held by a working session for less than
    any budget; a few comparisons tell them apart, where building their groups
    and evidence would be most of a poll at 50,000 locks. A key is kept for a
    waiter, a hold past the target's max_hold, a holder idle past its
    orphan_after or on a pooled server connection, or a name (which may carry
    its own budgets and allowed holders). A new check must fire only on keys
    kept here.
    """
    if settings.max_hold < 0 or settings.orphan_after < 0:
        return list(snapshot.locks)  # every holder is past a negative budget
    held_before = _before(now, settings.max_hold)
    idle_before = _before(now, settings.orphan_after)
    named = {lock.key for lock in settings.named}
    suspects = pooled | {
        pid
        for pid, backend in snapshot.backends.items()
        if backend.state in IDLE_STATES
        and backend.state_change is not None
        and backend.state_change < idle_before
    }
    loud: set[tuple[str, LockKey]] = set()
    for lock in snapshot.locks:
        if (
            not lock.granted
            or (lock.first_seen is not None and lock.first_seen < held_before)
            or lock.pid in suspects
            or (named and lock.key in named)
        ):
            loud.add((lock.database, lock.key))
    if not loud:
        return []
    return [lock for lock in snapshot.locks if (lock.database, lock.key) in loud]


def _groups(
    snapshot: LockSnapshot,
    settings: LockSettings,
    now: datetime,
    pooled: frozenset[int] = frozenset(),
) -> list[_Group]:
    rows: dict[tuple[str, LockKey], list[AdvisoryLock]] = {}
    for lock in _worth_checking(snapshot, settings, now, pooled):
        rows.setdefault((lock.database, lock.key), []).append(lock)
    groups = []
    for (database, key), locks in sorted(rows.items()):
        if settings.ignored(database, key):
            continue
        holders = []
        waiters = []
        for lock in locks:
            backend = snapshot.backends.get(lock.pid)
            if lock.granted:
                idle = None
                if backend is not None and backend.state in IDLE_STATES:
                    idle = seconds_between(now, backend.state_change)
                holders.append(_Holder(lock, backend, seconds_between(now, lock.first_seen), idle))
            else:
                started = lock.wait_start or lock.first_seen
                waiters.append(_Waiter(lock, backend, seconds_between(now, started)))
        holders.sort(key=lambda h: (h.lock.pid, h.lock.mode))
        waiters.sort(key=lambda w: (-w.waited, w.lock.pid))
        groups.append(
            _Group(
                database,
                key,
                settings.named_lock(database, key),
                tuple(holders),
                tuple(waiters),
            )
        )
    return groups


def _held_too_long(
    group: _Group, settings: LockSettings, snapshot: LockSnapshot, now: datetime
) -> _Draft | None:
    budget, _ = _budgets(group, settings)
    holder = max(group.holders, key=lambda h: (h.held, -h.lock.pid), default=None)
    if budget is None or holder is None or holder.held <= budget:
        return None
    assert holder.lock.first_seen is not None  # a positive hold has a start
    others = sum(1 for h in group.holders if h.held > budget) - 1
    summary = (
        f"lock {group.label()} in {one_line(group.database)} held "
        f"{format_duration(holder.held)} by {_who(holder)}{_more(others)}, {_doing(holder)}; "
        f"budget {format_duration(budget)}{_waiting(group)}"
    )
    return _Draft(
        FindingKind.LOCK_HELD_TOO_LONG,
        group,
        Severity.CRITICAL if group.waiters else Severity.WARNING,
        holder.lock.first_seen + timedelta(seconds=budget),
        summary,
        _evidence(group, settings, snapshot, now, holder),
    )


def _convoy(
    group: _Group, settings: LockSettings, snapshot: LockSnapshot, now: datetime
) -> _Draft | None:
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
        holder_text = f"holder {_who(holder, addr=False)}{_more(others)} {_doing(holder)}"
    summary = (
        f"{len(group.waiters)} sessions wait on lock {group.label()} in "
        f"{one_line(group.database)}, longest {format_duration(longest.waited)}; {holder_text}"
    )
    starts = [w.started for w in group.waiters if w.started is not None]
    return _Draft(
        FindingKind.LOCK_CONVOY,
        group,
        Severity.CRITICAL,
        min(starts, default=now),
        summary,
        _evidence(group, settings, snapshot, now, holder),
    )


def _orphaned(
    group: _Group, settings: LockSettings, snapshot: LockSnapshot, now: datetime
) -> _Draft | None:
    _, orphan_after = _budgets(group, settings)
    holder = max(
        (h for h in group.holders if h.idle is not None),
        key=lambda h: (h.idle or 0.0, -h.lock.pid),
        default=None,
    )
    if orphan_after is None or holder is None or holder.idle is None:
        return None
    if holder.idle <= orphan_after:
        return None
    backend = holder.backend
    assert backend is not None and backend.state_change is not None  # it has an idle time
    others = sum(1 for h in group.holders if h.idle is not None and h.idle > orphan_after) - 1
    summary = (
        f"lock {group.label()} in {one_line(group.database)} held by {_who(holder)}"
        f"{_more(others)}, {one_line(backend.state)} {format_duration(holder.idle)} "
        f'since "{one_line(backend.query)}"{_waiting(group)}'
    )
    return _Draft(
        FindingKind.LOCK_ORPHANED,
        group,
        Severity.CRITICAL if group.waiters else Severity.WARNING,
        backend.state_change + timedelta(seconds=orphan_after),
        summary,
        _evidence(group, settings, snapshot, now, holder),
    )


def _unexpected_holder(
    group: _Group, settings: LockSettings, snapshot: LockSnapshot, now: datetime
) -> _Draft | None:
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
    evidence = _evidence(group, settings, snapshot, now, holder)
    allowed = ", ".join(
        [one_line(a) for a in evidence["allowed_applications"]]
        + [one_line(a) for a in evidence["allowed_addresses"]]
    )
    summary = (
        f"lock {group.label()} in {one_line(group.database)} held by {_who(holder)}"
        f"{_more(len(strangers) - 1)}, not an allowed holder (allowed: {allowed})"
    )
    return _Draft(
        FindingKind.LOCK_UNEXPECTED_HOLDER,
        group,
        Severity.CRITICAL,
        holder.lock.first_seen or now,
        summary,
        evidence,
    )


def _leaders_missing(
    snapshot: LockSnapshot, settings: LockSettings, now: datetime
) -> Iterable[_Draft]:
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
            _Waiter(
                lock,
                snapshot.backends.get(lock.pid),
                seconds_between(now, lock.wait_start or lock.first_seen),
            )
            for lock in rows
        ]
        waiters.sort(key=lambda w: (-w.waited, w.lock.pid))
        group = _Group(named.database, named.key, named, (), tuple(waiters))
        where = f"in {one_line(named.database)}" if named.database else "in any database"
        yield _Draft(
            FindingKind.LEADER_LOCK_MISSING,
            group,
            Severity.CRITICAL,
            now,
            f"leader lock {group.label()} is held by nobody {where}{_waiting(group)}",
            _evidence(group, settings, snapshot, now, None),
        )


def _session_level(holder: _Holder) -> bool:
    """Whether a held advisory lock is provably session-level.

    pg_locks does not say; but a transaction-level lock ends with its
    transaction, so a lock held with no transaction open, or seen before the
    current transaction began, is a session lock.
    """
    backend = holder.backend
    if backend is None:
        return False
    if backend.state == "idle" or backend.xact_start is None:
        return True
    return holder.lock.first_seen is not None and holder.lock.first_seen < backend.xact_start


def _pooler_facts(pooler: PoolerSnapshot, server: PoolerConnection) -> dict[str, Any]:
    client = pooler.client_linked_to(server)
    return {
        "pool": {
            "database": server.database,
            "user": server.user,
            "pool_mode": pooler.pool_mode(server),
        },
        "server_connection": {
            "backend_pid": server.remote_pid,
            "state": server.state,
            "pooler_port": server.local_port,
            "connect_time": server.connect_time,
            "request_time": server.request_time,
        },
        "linked_client": None
        if client is None
        else {
            "addr": client.addr,
            "port": client.port,
            "application_name": client.application_name,
            "state": client.state,
            "connect_time": client.connect_time,
        },
    }


def _pooled_session(
    group: _Group,
    settings: LockSettings,
    snapshot: LockSnapshot,
    now: datetime,
    pooler: PoolerSnapshot,
) -> _Draft | None:
    pooled = []
    for holder in group.holders:
        server = pooler.server_for(
            holder.lock.pid, holder.backend.client_port if holder.backend else None
        )
        if server is None or pooler.pool_mode(server) not in SHARED_POOL_MODES:
            continue
        if _session_level(holder):
            pooled.append((holder, server))
    if not pooled:
        return None
    holder, server = min(
        pooled, key=lambda pair: (pair[0].lock.first_seen or now, pair[0].lock.pid)
    )
    facts = _pooler_facts(pooler, server)
    client = facts["linked_client"]
    now_serving = (
        f"now serving client {one_line(client['addr'] or 'local')}:{client['port']}"
        f" ({one_line(client['application_name'] or '-')})"
        if client
        else "no client linked to it now"
    )
    summary = (
        f"session lock {group.label()} in {one_line(group.database)} held by backend pid "
        f"{holder.lock.pid} of pgbouncer pool {one_line(server.database)}/{one_line(server.user)} "
        f"in {facts['pool']['pool_mode']} mode: it belongs to no client ({now_serving}); "
        "any client handed this backend can take it again"
    )
    return _Draft(
        FindingKind.LOCK_POOLED_SESSION,
        group,
        Severity.CRITICAL,
        holder.lock.first_seen or now,
        summary,
        {**_evidence(group, settings, snapshot, now, holder), **facts},
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
    findings about the same subject name each other in ``evidence["related"]``.
    """
    pooled: frozenset[int] = frozenset()
    if pooler is not None:
        pooled = frozenset(
            server.remote_pid
            for server in pooler.servers
            if server.remote_pid is not None and pooler.pool_mode(server) in SHARED_POOL_MODES
        )
    groups = _groups(snapshot, settings, now, pooled)
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
            if (draft := _pooled_session(group, settings, snapshot, now, pooler)) is not None
        )
    drafts.extend(_leaders_missing(snapshot, settings, now))
    drafts, overflow = _capped(drafts)
    drafts.sort(key=lambda d: (d.kind.value, d.group.database or "", d.group.key))
    kinds: dict[Subject, set[str]] = {}
    for draft in drafts:
        kinds.setdefault(draft.group.subject, set()).add(draft.kind.value)
    findings = [
        Finding(
            draft.kind,
            snapshot.target,
            draft.group.subject,
            draft.severity,
            draft.since,
            draft.summary,
            {**draft.evidence, "related": sorted(kinds[draft.group.subject] - {draft.kind.value})},
        )
        for draft in drafts
    ]
    findings.extend(_overflow_finding(snapshot.target, rest) for rest in overflow)
    return findings


def _capped(drafts: list[_Draft]) -> tuple[list[_Draft], list[list[_Draft]]]:
    """At most FINDINGS_PER_KIND findings of one kind: named locks first, then
    the most severe and oldest. The rest of each kind come back apart, to be
    told as one finding: 50,000 orphaned locks are one problem to a person,
    and 50,000 log lines and messages would bury it."""
    by_kind: dict[FindingKind, list[_Draft]] = {}
    for draft in drafts:
        by_kind.setdefault(draft.kind, []).append(draft)
    kept: list[_Draft] = []
    overflow: list[list[_Draft]] = []
    for kind_drafts in by_kind.values():
        kind_drafts.sort(
            key=lambda d: (
                d.group.named is None,
                d.severity is not Severity.CRITICAL,
                d.since,
                d.group.key,
            )
        )
        kept.extend(kind_drafts[:FINDINGS_PER_KIND])
        if len(kind_drafts) > FINDINGS_PER_KIND:
            overflow.append(kind_drafts[FINDINGS_PER_KIND:])
    return kept, overflow


def _overflow_finding(target: str, rest: list[_Draft]) -> Finding:
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
        {
            "count": len(rest),
            "locks": keys[:OVERFLOW_KEYS],
            "cap": FINDINGS_PER_KIND,
            "related": [],
        },
    )

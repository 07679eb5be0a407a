"""One advisory-lock key as the lock detectors see it: its holders and waiters,
its budgets, and the evidence its findings carry.

Pure, like every detector: the clock comes in as ``now``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from lockwatch.detect.evidence import age_seconds, blocking_chain, session_args
from lockwatch.model.catalogue import Purpose
from lockwatch.model.evidence import (
    HistoryFacts,
    HolderFacts,
    LockEvidence,
    PooledHolderFacts,
    PreparedFacts,
    WaiterFacts,
)
from lockwatch.model.findings import FindingKind, Severity, Subject
from lockwatch.model.hold_history import HistoryKey, KeyHistory
from lockwatch.model.locks import (
    HIDDEN,
    UNTRACKED_STATE,
    AdvisoryLock,
    Backend,
    LockKey,
    LockSnapshot,
)
from lockwatch.model.pooler import PooledBackend
from lockwatch.settings.fields import Learned
from lockwatch.settings.locks import LockRole, LockSettings, NamedLock
from lockwatch.text import format_duration, format_short_duration, one_line

Histories = Mapping[HistoryKey, KeyHistory]

# What a holder with track_activities off is doing, as far as anyone can tell.
UNTRACKED = "not tracked: track_activities is off"


@dataclass(frozen=True, slots=True)
class Holder:
    lock: AdvisoryLock
    backend: Backend | None
    held: float
    idle: float | None  # seconds idle, None unless the backend is in an idle state
    # A pooler's backend: its application_name and client_addr are not the holder's.
    pooled: PooledBackend | None = None

    @property
    def waits(self) -> bool:
        return self.backend is not None and (
            self.backend.waiting_on_lock or bool(self.backend.blocked_by)
        )


@dataclass(frozen=True, slots=True)
class Waiter:
    lock: AdvisoryLock
    backend: Backend | None
    waited: float

    @property
    def started(self) -> datetime | None:
        return self.lock.wait_start or self.lock.first_seen


@dataclass(frozen=True, slots=True)
class KeyGroup:
    """Every row of one (database, key), with what the settings say about it."""

    database: str | None  # None only for a leader lock meant in every database
    key: LockKey
    named: NamedLock | None
    holders: tuple[Holder, ...]
    waiters: tuple[Waiter, ...]
    history: KeyHistory | None = None  # its completed holds, when any are recorded
    # max(factor x p99, floor) of those holds once learned; None while learning
    learned: float | None = None
    # Held on purpose, as its library's rows say (a running job's, a live
    # process's): never held too long nor orphaned. None: judged as any key.
    on_purpose: Purpose | None = None

    @property
    def subject(self) -> Subject:
        return Subject(self.database, self.named.name if self.named else self.key.render())

    @property
    def leader(self) -> bool:
        return self.named is not None and self.named.role is LockRole.LEADER

    @property
    def longest_waiter(self) -> Waiter | None:
        return max(self.waiters, key=lambda w: (w.waited, -w.lock.pid), default=None)

    def label(self) -> str:
        """``webhook-delivery (42)`` for a named lock, ``42`` otherwise."""
        if self.named is None:
            return self.key.render()
        return f"{one_line(self.named.name)} ({self.key.render()})"


@dataclass(frozen=True, slots=True)
class Draft:
    """A finding before it knows its target and its related findings.

    Its summary and evidence are written only for the draft of each holder's
    longest hold (``detect/lock_holders.py``): a holder's 5,000 keys past
    their budget are one finding, and writing evidence that was thrown away
    was most of a flood's poll."""

    kind: FindingKind
    group: KeyGroup
    severity: Severity
    since: datetime
    summary: Callable[[], str]
    evidence: Callable[[], LockEvidence]
    # The holder the finding blames (None: nobody, or nobody seen): its
    # drafts on keys the config does not name are told per holder.
    holder: Holder | None = None


def budgets(group: KeyGroup, settings: LockSettings) -> tuple[float | None, float | None]:
    """(max_hold, orphan_after) for the group; None switches the check off.
    A leader is meant to be held for ever, so it only gets the budgets it names.
    An ``auto`` budget is the learned one, the static default until then.
    A lock held on purpose (a running job's, a live process's) gets none."""
    if group.on_purpose is not None:
        return None, None
    named = group.named
    if named is not None and named.max_hold is not None:
        max_hold: float | Learned | None = named.max_hold
    else:
        max_hold = None if group.leader else settings.max_hold
    if named is not None and named.orphan_after is not None:
        orphan_after: float | Learned | None = named.orphan_after
    else:
        orphan_after = None if group.leader else settings.orphan_after
    return (
        _in_force(max_hold, group, settings.static_max_hold),
        _in_force(orphan_after, group, settings.static_orphan_after),
    )


def _in_force(budget: float | Learned | None, group: KeyGroup, default: float) -> float | None:
    if not isinstance(budget, Learned):
        return budget
    if group.learned is not None:
        return group.learned
    return None if group.leader else default


def history_facts(group: KeyGroup, holder: Holder | None) -> HistoryFacts | None:
    """``usually 40ms, p99 800ms, now 5m``: the key's normal against this hold."""
    holds = None if group.history is None else group.history.holds
    if holds is None:
        return None
    text = f"usually {format_short_duration(holds.p50)}, p99 {format_short_duration(holds.p99)}"
    if holder is not None:
        text += f", now {format_short_duration(holder.held)}"
    return HistoryFacts(
        holds=holds.count,
        p50_seconds=round(holds.p50, 3),
        p99_seconds=round(holds.p99, 3),
        longest_seconds=round(holds.longest, 3),
        learned=group.learned is not None,
        text=text,
    )


def who(holder: Holder, *, addr: bool = True) -> str:
    """``pid 1234 (webhook-worker-1 from 10.0.0.5)``, or ``prepared transaction
    'nightly-7' (owner app)``"""
    prepared = holder.lock.prepared
    if prepared is not None:
        return f"prepared transaction '{one_line(prepared.gid)}' (owner {one_line(prepared.owner)})"
    backend = holder.backend
    if backend is None:
        return f"pid {holder.lock.pid}"
    if holder.pooled is not None:
        # Never the last client's name: it did not take the lock (or may not have).
        if not holder.pooled.known:
            return f"backend {holder.lock.pid}, client unknown"
        return f"pid {holder.lock.pid} ({_pooled_backend(holder.pooled)}; client unknown)"
    app = one_line(backend.application_name) or "no application_name"
    if addr:
        return f"pid {holder.lock.pid} ({app} from {one_line(backend.where)})"
    return f"pid {holder.lock.pid} ({app})"


def pooled_note(pooled: PooledBackend, backend: Backend) -> str:
    """``pooled backend of pool app/app; the client that took the lock is
    unknown; last client: web-worker from 127.0.0.1``"""
    app = one_line(backend.application_name) or "no application_name"
    last = f"last client: {app} from {one_line(backend.where)}"
    if not pooled.known:
        return (
            f"backend {backend.pid}, client unknown: clients may come through a pooler "
            f"whose console is not read, so its name may be a pool's; {last}"
        )
    return f"{_pooled_backend(pooled)}; the client that took the lock is unknown; {last}"


def _pooled_backend(pooled: PooledBackend) -> str:
    """``pooled backend of pool app/app``, or ``of a pooler (inferred)``"""
    of = f"pool {one_line(pooled.pool)}" if pooled.pool else "a pooler"
    return f"pooled backend of {of}{' (inferred)' if pooled.inferred else ''}"


def doing(holder: Holder) -> str:
    """What the holder's session is up to, for a summary: ``idle 330s``."""
    if holder.lock.prepared is not None:
        return f"prepared {format_duration(holder.held)} ago, no session"
    backend = holder.backend
    if backend is None:
        return "session not seen"
    if not backend.visible:
        return f"activity {HIDDEN}"
    if holder.waits:
        blockers = ",".join(str(p) for p in backend.blocked_by) or "?"
        return f"itself waiting on pid {blockers}"
    if holder.idle is not None:
        return f"{one_line(backend.state)} {format_duration(holder.idle)}"
    return (
        UNTRACKED
        if backend.state == UNTRACKED_STATE
        else one_line(backend.state or "state unknown")
    )


def and_more(count: int) -> str:
    return f" and {count} more" if count else ""


def waited_text(longest: Waiter) -> str:
    """How long the longest waiter has waited, or that nobody knows: a
    one-shot look on PostgreSQL before 14 has no ``waitstart`` to date it."""
    if longest.started is None:
        return "for how long unknown (no waitstart before PostgreSQL 14)"
    return f"longest {format_duration(longest.waited)}"


def waiting_text(group: KeyGroup) -> str:
    return f"; {len(group.waiters)} waiting" if group.waiters else ""


def holder_facts(holder: Holder, now: datetime) -> HolderFacts:
    backend = holder.backend
    facts = HolderFacts(
        **session_args(backend, holder.lock.pid, now),
        usename=backend.usename if backend else None,
        held_seconds=round(holder.held, 1),
        mode=holder.lock.mode,
        xact_seconds=age_seconds(now, backend.xact_start) if backend else None,
        prepared=_prepared_facts(holder),
        backend_start=backend.backend_start if backend else None,
    )
    if holder.pooled is None or backend is None:
        return facts
    # What the backend shows is its last client's: kept apart, not the holder's.
    return replace(
        facts,
        application_name=None,
        client_addr=None,
        client_port=None,
        client_hostname=None,
        query=None,
        pooled=PooledHolderFacts(
            pool=holder.pooled.pool,
            inferred=holder.pooled.inferred,
            last_client_application_name=facts.application_name,
            last_client_addr=facts.client_addr,
            last_client_query=facts.query,
            note=pooled_note(holder.pooled, backend),
        ),
    )


def _prepared_facts(holder: Holder) -> PreparedFacts | None:
    prepared = holder.lock.prepared
    if prepared is None:
        return None
    return PreparedFacts(
        prepared.gid, prepared.owner, prepared.database, prepared.prepared, prepared.transaction
    )


def waiter_facts(waiter: Waiter) -> WaiterFacts:
    backend = waiter.backend
    return WaiterFacts(
        pid=waiter.lock.pid,
        application_name=backend.application_name if backend else None,
        client_addr=None if backend is None else _shown(backend, backend.client_addr),
        state=None if backend is None else _shown(backend, backend.state),
        wait_seconds=round(waiter.waited, 1),
        blocked_by=tuple(backend.blocked_by) if backend else (),
    )


def _shown(backend: Backend, fact: str | None) -> str | None:
    """One of a session's hidden facts as evidence shows it."""
    return fact if backend.visible else HIDDEN


def lock_evidence(
    group: KeyGroup,
    settings: LockSettings,
    snapshot: LockSnapshot,
    now: datetime,
    holder: Holder | None,
) -> LockEvidence:
    max_hold, orphan_after = budgets(group, settings)
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
    return LockEvidence(
        key=group.key.render(),
        name=group.named.name if group.named else None,
        role=group.named.role.value if group.named else None,
        database=group.database,
        holder_pid=holder.lock.pid if holder else None,
        holders=tuple(holder_facts(h, now) for h in group.holders),
        waiters=tuple(waiter_facts(w) for w in group.waiters),
        waiter_count=len(group.waiters),
        longest_wait_seconds=round(longest.waited, 1) if longest else None,
        max_hold_seconds=max_hold,
        orphan_after_seconds=orphan_after,
        allowed_applications=tuple(allowed.applications) if allowed else (),
        allowed_addresses=tuple(addresses),
        chain=() if chain_from is None else blocking_chain(snapshot, chain_from, now),
        history=history_facts(group, holder),
    )

"""The evidence of advisory-lock findings: one key's holders, waiters, budgets
and blocking chain, and the findings past the per-kind cap told as one."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from lockwatch.model.evidence.sessions import ChainStep, FindingFacts, HolderFacts, WaiterFacts
from lockwatch.model.keepalive import OrphanLifetime


@dataclass(frozen=True, slots=True)
class HistoryFacts:
    """What the key's completed holds say is normal for it."""

    holds: int  # completed holds recorded
    p50_seconds: float
    p99_seconds: float
    longest_seconds: float
    learned: bool  # the budget in force was learned from these holds
    text: str  # ``usually 40ms, p99 800ms, now 5m``


@dataclass(frozen=True, slots=True)
class LockEvidence(FindingFacts):
    """One (database, key): who holds it, who waits, what the settings allow."""

    key: str  # as the application wrote it: ``42``, ``7,13``
    name: str | None  # the configured name; None for a key not named
    role: str | None  # a named lock's role: ``mutex`` or ``leader``
    database: str | None  # None only for a leader lock meant in every database
    holder_pid: int | None  # the holder the finding blames; None: it blames none
    holders: tuple[HolderFacts, ...]
    waiters: tuple[WaiterFacts, ...]  # the longest-waiting first
    waiter_count: int
    longest_wait_seconds: float | None  # None without waiters
    max_hold_seconds: float | None  # the budgets in force; None: that check is off
    orphan_after_seconds: float | None
    allowed_applications: tuple[str, ...]  # a named lock's allowed holders; empty: any
    allowed_addresses: tuple[str, ...]  # CIDRs, and ``local`` for a local socket
    chain: tuple[ChainStep, ...]  # from the longest waiter (or a waiting holder) on; may be empty
    history: HistoryFacts | None  # None: no hold of the key has completed yet
    # lock_orphaned: how long such an orphan can live on this server (doctor's
    # estimate); None for other kinds, or when the server's settings were not read.
    orphan_lifetime: OrphanLifetime | None = field(default=None, kw_only=True)
    # A finding about a holder (a key the config does not name): how many keys
    # of the kind it holds, and the first of them as ``database/key``; this
    # key is its longest hold. 1 and () for a finding about a named key.
    held_keys: int = field(default=1, kw_only=True)
    first_keys: tuple[str, ...] = field(default=(), kw_only=True)

    @property
    def named_holders(self) -> tuple[HolderFacts, ...]:
        return tuple(sorted(self.holders, key=lambda holder: holder.pid != self.holder_pid))


@dataclass(frozen=True, slots=True)
class ChurnEvidence(LockEvidence):
    """A leader lock that changed hands too often: when, within the window."""

    changes: int  # holder changes within the window
    window_seconds: float
    changes_per_hour: float
    changed_at: tuple[str, ...]  # ISO times of those changes, oldest first

    @classmethod
    def of(
        cls, lock: LockEvidence, window_seconds: float, changed_at: tuple[str, ...]
    ) -> ChurnEvidence:
        """The lock's evidence, with the holder changes seen within the window."""
        return cls(
            **{field.name: getattr(lock, field.name) for field in fields(LockEvidence)},
            changes=len(changed_at),
            window_seconds=window_seconds,
            changes_per_hour=round(len(changed_at) * 3600.0 / window_seconds, 2),
            changed_at=changed_at,
        )


@dataclass(frozen=True, slots=True)
class OverflowEvidence(FindingFacts):
    """The findings of one kind past the cap reported one by one, as one."""

    count: int
    locks: tuple[str, ...]  # ``database/lock`` of the first of them
    cap: int  # findings of one kind reported one by one
    # The holders those findings blame, the most blamed first (at most
    # OVERFLOW_HOLDERS): the root the overflow belongs to.
    holders: tuple[HolderFacts, ...] = ()

    @property
    def named_holders(self) -> tuple[HolderFacts, ...]:
        return self.holders

"""The evidence of advisory-lock findings: one key's holders, waiters, budgets
and blocking chain, and the findings past the per-kind cap told as one."""

from __future__ import annotations

from dataclasses import dataclass

from lockwatch.model.evidence.sessions import ChainStep, FindingFacts, HolderFacts, WaiterFacts


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

    @property
    def named_holders(self) -> tuple[HolderFacts, ...]:
        return tuple(sorted(self.holders, key=lambda holder: holder.pid != self.holder_pid))


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

"""The evidence of findings about waits on locks of other locktypes than
advisory (relations, rows, transaction ids): the session at their root, the
lock waited on, and who waits."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from lockwatch.model.evidence.sessions import FindingFacts, HolderFacts


@dataclass(frozen=True, slots=True)
class WaitingFacts:
    """A session waiting on a lock, whose blocking chain ends at the root."""

    pid: int
    application_name: str | None
    client_addr: str | None
    locktype: str  # relation, transactionid, tuple, ...
    mode: str  # the mode it asks for
    relation: str | None
    wait_seconds: float
    query: str | None  # what it waits to run, cut to a bounded length
    blocked_by: tuple[int, ...]  # hard and soft blockers, as pg_blocking_pids() names them
    # With pid, names one session (the server reuses pids); None: not seen.
    backend_start: datetime | None = field(default=None, kw_only=True)


@dataclass(frozen=True, slots=True)
class LockWaitEvidence(FindingFacts):
    """Sessions waiting, directly or down a chain, on one session (``root``):
    for lock_queue, the strong lock's wait (``waiting``) and the queue behind it."""

    root: HolderFacts  # the session at the root: its state, transaction age, last query
    relation: str | None  # the relation waited on (a row wait's table), when known
    waiting: WaitingFacts | None  # lock_queue: the strong lock's wait (DDL, LOCK TABLE, ...)
    queued: int  # lock_queue: sessions queued behind it; else the sessions waiting
    waiter_count: int  # every session whose chain ends at the root
    longest_wait_seconds: float
    budget_seconds: float  # the budget that made it a finding
    waiters: tuple[WaitingFacts, ...]  # the longest-waiting first, bounded
    advice: str  # what to do, in words

    @property
    def named_holders(self) -> tuple[HolderFacts, ...]:
        return (self.root,)

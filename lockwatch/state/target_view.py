"""What the board keeps of one target: the target as configured and what its
last poll left behind (lockwatch/model/views.py), with its running totals.
Here, not in model, because it carries the target's settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from lockwatch.model.catalogue import HeldLocks
from lockwatch.model.findings import Finding
from lockwatch.model.hold_history import KeyHistory
from lockwatch.model.incidents import Incident
from lockwatch.model.jobs import JobView
from lockwatch.model.queues import QueueView, WorkerView
from lockwatch.model.views import SourceHealth, TargetStatus
from lockwatch.settings.targets import Target


@dataclass(frozen=True, slots=True)
class TargetView:
    """What the last poll of one target left behind, with its running totals."""

    target: Target
    status: TargetStatus | None = None  # None until the first poll finished
    polls_total: int = 0
    poll_errors_total: int = 0
    last_success: datetime | None = None
    state_write_errors_total: int = 0  # saves to the state dir that failed
    findings: tuple[Finding, ...] = ()  # active findings of this target, oldest first
    # A serverless target lockwatch lets sleep: its session closed since then.
    asleep_since: datetime | None = None
    # Everything sampled besides the locks, as the target's monitors left it.
    sources: tuple[SourceHealth, ...] = ()
    queues: tuple[QueueView, ...] = ()
    workers: tuple[WorkerView, ...] = ()
    jobs: tuple[JobView, ...] = ()
    # The keys' completed holds and waits (named, catalogued, the top N, the rest as one).
    lock_history: tuple[KeyHistory, ...] = ()
    # The locks its queue libraries held on purpose at the last poll, named
    # from their rows (a running job's, a live process's).
    held_locks: HeldLocks = field(default_factory=dict)
    # The findings told as root causes: the open ones, worst first, and the
    # recently resolved ones, newest first (bounded; the rest is history).
    incidents: tuple[Incident, ...] = ()
    resolved_incidents: tuple[Incident, ...] = ()
    # Seconds between its polls now: its interval, or more while its lock
    # manager is contended (state/pace.py); None before the runner says.
    poll_interval: float | None = None
    # Slots of its interval left unpolled, by why (state/pace.py REASONS).
    slots_skipped: Mapping[str, int] = field(default_factory=dict)
    # Seconds sessions waited on locks of other locktypes than advisory, by
    # (database, locktype, relation), since lockwatch started (state/waiter_seconds.py).
    lock_waiter_seconds: Mapping[tuple[str, str, str], float] = field(default_factory=dict)

    @property
    def up(self) -> bool:
        return self.status is not None and self.status.up

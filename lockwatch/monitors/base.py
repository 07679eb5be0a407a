"""What every monitor is: one family of a target's sources with its detectors.

A poll of a target is three steps (``runner.py``): every monitor samples,
then every monitor judges, then the runner applies. ``sample`` does all of a
monitor's reads for the poll, through its sources (each in a
:class:`~lockwatch.sample.base.SourceRunner`), and keeps them for ``judge``;
the lock monitor's answers with the lock snapshot (:class:`Sampled`).
``judge`` makes no read: pure detectors over what was sampled and the
monitor's memory, given a :class:`PollContext` with the clock, the lock
snapshot and the findings of the monitors judged before it (which a stalled
queue's lock chain reads); it answers with a :class:`MonitorResult`. A
monitor owns the finding kinds of its family: while it cannot judge them,
they are held as they were, and when it breaks, so are all of them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from lockwatch.model.findings import Finding, FindingKind, Subject
from lockwatch.model.locks import LockSnapshot
from lockwatch.model.views import SourceHealth
from lockwatch.sample.base import Database
from lockwatch.state.target_view import TargetView

# Whatever a monitor keeps in the state dir: JSON-ready values.
StateDocument = Mapping[str, object]


@dataclass(frozen=True, slots=True)
class PollContext:
    """What one poll of a target hands to its monitors."""

    now: datetime
    db: Database | None  # None while the target's database cannot be sampled
    snapshot: LockSnapshot | None = None  # None until the locks were sampled this poll
    lock_findings: tuple[Finding, ...] = ()  # what the monitors before found this poll
    # The monotonic clock as the poll began (None: not given): lockwatch's own
    # hold times follow it through jumps of the wall clock.
    monotonic: float | None = None
    # Seconds lockwatch planned from the last poll to this one while the
    # target answered: its interval, slowed while the lock manager is
    # contended, with the slots a poll that overran skipped (None: not
    # planned so, as at the first poll and after a poll that found no target).
    spacing: float | None = None


@dataclass(frozen=True, slots=True)
class Sampled:
    """What a monitor's reads tell the rest of the poll: the lock monitor's
    snapshot, which every later monitor reads, and why the target itself
    could not be sampled (its locks are what lockwatch is for)."""

    snapshot: LockSnapshot | None = None
    target_error: str | None = None


@dataclass(frozen=True, slots=True)
class MonitorResult:
    findings: tuple[Finding, ...] = ()
    # (kind, subject) of findings that cannot be judged this poll (a source
    # failing, a window not yet covered): active ones stay as they are.
    undecided: frozenset[tuple[FindingKind, Subject]] = frozenset()
    # Whole kinds that cannot be judged this poll, whatever their subject.
    held_kinds: frozenset[FindingKind] = frozenset()


class Monitor(Protocol):
    """One family of per-target sources with its detectors."""

    @property
    def kinds(self) -> frozenset[FindingKind]:
        """The finding kinds this monitor raises and resolves."""
        ...

    def sample(self, context: PollContext) -> Sampled:
        """Every read of this poll, kept for ``judge``."""
        ...

    def judge(self, context: PollContext) -> MonitorResult:
        """The findings of what ``sample`` read: no read of its own."""
        ...

    def publish(self, view: TargetView) -> TargetView:
        """The board's view of the target with this monitor's state filled in."""
        ...

    def save(self, now: datetime) -> StateDocument:
        """What must outlive a restart, to go in the target's state file."""
        ...

    def restore(self, document: StateDocument) -> None:
        """Take back what ``save`` gave, as read from the state file."""
        ...

    def save_due(self, now: datetime, saved_at: datetime | None) -> bool:
        """Whether the state file should be written now for this monitor's
        sake (``saved_at``: when it last was, None if never)."""
        ...

    def take_over(self, old: Monitor) -> None:
        """Carry on from the monitor this one replaces after a config change."""
        ...

    def close(self) -> None: ...


@dataclass
class Stateless:
    """The state half of :class:`Monitor` for a monitor that keeps nothing
    across restarts and config changes."""

    def save(self, now: datetime) -> StateDocument:
        return {}

    def restore(self, document: StateDocument) -> None:
        return

    def save_due(self, now: datetime, saved_at: datetime | None) -> bool:
        return False

    def take_over(self, old: Monitor) -> None:
        return


def undecided_while_down(
    health: SourceHealth, subjects: Collection[Subject], kinds: Collection[FindingKind]
) -> frozenset[tuple[FindingKind, Subject]]:
    """Every (kind, subject) a source feeds, when its last attempt gave no reading."""
    if health.up:
        return frozenset()
    return frozenset((kind, subject) for kind in kinds for subject in subjects)

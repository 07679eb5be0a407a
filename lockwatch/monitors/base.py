"""What every monitor is: one family of a target's sources with its detectors."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from lockwatch.model.findings import Finding, FindingKind, Subject
from lockwatch.model.locks import LockSnapshot
from lockwatch.model.views import SourceHealth, TargetView
from lockwatch.sample.base import Database


@dataclass(frozen=True, slots=True)
class PollContext:
    """What one poll of a target hands to its monitors."""

    now: datetime
    db: Database | None
    snapshot: LockSnapshot | None  # None when the locks could not be sampled
    lock_findings: tuple[Finding, ...]


@dataclass(frozen=True, slots=True)
class MonitorResult:
    findings: tuple[Finding, ...]
    # (kind, subject) of findings that cannot be judged this poll (a source
    # failing, a window not yet covered): active ones stay as they are.
    undecided: frozenset[tuple[FindingKind, Subject]] = frozenset()


class Monitor(Protocol):
    """One family of per-target sources with its detectors."""

    def poll(self, context: PollContext) -> MonitorResult: ...

    def publish(self, view: TargetView) -> TargetView:
        """The board's view of the target with this monitor's state filled in."""
        ...

    def close(self) -> None: ...


def undecided_while_down(
    health: SourceHealth, subjects: Collection[Subject], kinds: Collection[FindingKind]
) -> frozenset[tuple[FindingKind, Subject]]:
    """Every (kind, subject) a source feeds, when its last attempt gave no reading."""
    if health.up:
        return frozenset()
    return frozenset((kind, subject) for kind in kinds for subject in subjects)

"""What one poll of a target left behind for the publishers: its status, its sources' health and its view."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from lockwatch.model.evidence.targets import SourceBlocker
from lockwatch.model.locks import LockSnapshot
from lockwatch.model.pooler import SessionPooling


@dataclass(frozen=True, slots=True)
class TargetStatus:
    """How sampling one target went: the snapshot, or why there is none."""

    target: str
    checked_at: datetime
    snapshot: LockSnapshot | None
    error: str | None = None  # already free of secrets
    failing_since: datetime | None = None
    # lockwatch's own session goes through a transaction pooler
    pooling: SessionPooling | None = None

    @property
    def up(self) -> bool:
        return self.snapshot is not None and self.error is None


@dataclass(frozen=True, slots=True)
class SourceHealth:
    """How the last attempts to sample one of a target's sources went."""

    name: str
    up: bool = False
    checked_at: datetime | None = None
    error: str | None = None  # free of secrets
    # When it began failing on its own; None while fine, and while it merely
    # waits for its target's database to come back.
    failing_since: datetime | None = None
    samples_total: int = 0
    errors_total: int = 0
    # Who held what its last failed query waited on (it timed out).
    blocked_by: tuple[SourceBlocker, ...] = ()

    def succeeded(self, now: datetime) -> SourceHealth:
        return SourceHealth(
            self.name, True, now, None, None, self.samples_total + 1, self.errors_total
        )

    def failed(
        self, now: datetime, error: str, blocked_by: tuple[SourceBlocker, ...] = ()
    ) -> SourceHealth:
        return SourceHealth(
            self.name,
            False,
            now,
            error,
            self.failing_since or now,
            self.samples_total + 1,
            self.errors_total + 1,
            blocked_by,
        )

    def skipped(self, now: datetime, reason: str) -> SourceHealth:
        return SourceHealth(
            self.name, False, now, reason, None, self.samples_total, self.errors_total
        )

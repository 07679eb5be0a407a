"""The evidence of ``queue_capacity_lost``: a queue completing much less than
its learned normal while work waits and its backlog grows."""

from __future__ import annotations

from dataclasses import dataclass, field

from lockwatch.model.evidence.queues import WorkerFacts
from lockwatch.model.evidence.sessions import FindingFacts


@dataclass(frozen=True, slots=True)
class CapacityEvidence(FindingFacts):
    """The judging window against the queue's learned normal."""

    queue: str
    completed_per_minute: float  # over the window
    normal_per_minute: float  # the learned normal while work waited
    fraction: float  # capacity_fraction: below fraction x normal is lost
    window_seconds: float
    learned_minutes: int  # the saturated minutes the normal was learned from
    depth_at_window_start: int
    depth: int
    oldest_age_seconds: float | None
    consumers: int | None  # now, where the library tells
    consumers_normal: float | None  # learned
    in_flight: int | None  # busy slots now, where the library tells
    in_flight_normal: float | None  # learned
    longest_job_seconds: float | None  # the longest-running job now, where told
    changed: tuple[str, ...]  # what changed, in words: consumers gone, slots held, ...
    # The bound worker groups, with the locks their sessions wait on (a queue
    # losing capacity to a lock wait joins that lock's incident).
    workers: tuple[WorkerFacts, ...] = field(default=(), kw_only=True)

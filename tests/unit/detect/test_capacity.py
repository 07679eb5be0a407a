"""queue_capacity_lost on a replayed day of queue history, on an injected
clock: a pg-boss-like queue with 6 consumers of 10 jobs a minute each,
quiet nights, a day's steady demand they keep up with, bursts every two hours
that build a backlog and drain it. A healthy day makes no finding of
capacity, stall or missing consumer; 3 of the 6 consumers hanging on their
jobs (tuist/tuist#12718) is found, and how long after is printed (the
detection figure in docs/benchmarks.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from lockwatch.detect.capacity import detect_capacity_lost, window_minutes
from lockwatch.detect.no_consumer import consumer_counts, detect_no_consumer, unserved_since
from lockwatch.detect.queue_locks import LockContext
from lockwatch.detect.queues import QueueInput, detect_queues, in_window
from lockwatch.model.evidence import CapacityEvidence
from lockwatch.model.findings import Finding, FindingKind
from lockwatch.model.queues import QueueMinute, QueueSample, ThroughputNormal
from lockwatch.settings.locks import LockSettings
from lockwatch.settings.queues import QueueThresholds
from lockwatch.state.throughput import QueueThroughput
from tests.fixtures.evidence import evidence_as

START = datetime(2026, 3, 14, 0, 0, tzinfo=UTC)
STEP = 30.0  # seconds between polls of the replay
PER_CONSUMER = 10.0  # jobs a minute each consumer completes while work waits
THRESHOLDS = QueueThresholds()


def arrivals_per_minute(at: datetime) -> float:
    """Quiet nights, steady days, a 20-minute burst every two hours."""
    if at.hour < 7:
        return 5.0
    if at.hour % 2 == 0 and at.minute < 20:
        return 90.0
    return 40.0


@dataclass
class ReplayedQueue:
    """The queue's library as a model: its rows, its consumers, its clock."""

    consumers: int = 6
    hung: int = 0
    hung_since: datetime | None = None
    depth: float = 0.0
    completed: float = 0.0
    at: datetime = START
    findings: list[Finding] = field(default_factory=list)

    def step(self) -> QueueSample:
        minutes = STEP / 60
        self.depth += arrivals_per_minute(self.at) * minutes
        done = min(self.depth, (self.consumers - self.hung) * PER_CONSUMER * minutes)
        self.depth -= done
        self.completed += done
        self.at += timedelta(seconds=STEP)
        waiting = int(self.depth)
        busy = self.consumers if waiting else self.hung + min(self.consumers - self.hung, 4)
        return QueueSample(
            self.at,
            waiting,
            oldest_age_seconds=waiting / max(1.0, self.consumers - self.hung) * 6.0,
            completed_total=int(self.completed),
            in_flight=busy,
            consumers=self.consumers,  # hung consumers are alive: pg-boss still beats for them
        )


class Detectors:
    """What the queue monitor runs, over the replay's readings."""

    def __init__(self) -> None:
        self.throughput = QueueThroughput(THRESHOLDS.capacity_learning, THRESHOLDS.capacity_window)
        self.samples: list[QueueSample] = []
        self.unserved: datetime | None = None

    def poll(self, sample: QueueSample, queue: ReplayedQueue) -> list[Finding]:
        self.throughput.add(sample)
        self.samples = [*in_window(self.samples, sample.at, THRESHOLDS.window), sample]
        found = list(
            detect_queues(
                "main",
                [QueueInput("reports", THRESHOLDS, tuple(self.samples))],
                LockContext(None, LockSettings()),
                sample.at,
            ).findings
        )
        self.unserved = unserved_since(self.unserved, sample, consumer_counts(sample, ()))
        no_consumer = detect_no_consumer(
            "main", QueueInput("reports", THRESHOLDS, (sample,)), self.unserved, sample.at
        )
        normal = self.throughput.normal(THRESHOLDS.capacity_min_minutes, window_minutes(THRESHOLDS))
        longest = (
            None if queue.hung_since is None else (sample.at - queue.hung_since).total_seconds()
        )
        capacity = detect_capacity_lost(
            "main", "reports", THRESHOLDS, self.throughput.recent(), normal, longest
        )
        return [*found, *(f for f in (no_consumer, capacity) if f is not None)]


def replay(queue: ReplayedQueue, detectors: Detectors, until: datetime) -> list[Finding]:
    found = []
    while queue.at < until:
        found.extend(detectors.poll(queue.step(), queue))
    return found


def test_a_healthy_day_of_bursts_and_quiet_nights_makes_no_finding_and_half_the_consumers_hung_is_found() -> (
    None
):
    queue, detectors = ReplayedQueue(), Detectors()
    day = replay(queue, detectors, START + timedelta(days=1))
    kinds = [f.kind for f in day]
    judged = (
        FindingKind.QUEUE_CAPACITY_LOST,
        FindingKind.QUEUE_STALLED,
        FindingKind.QUEUE_NO_CONSUMER,
    )
    assert [k for k in kinds if k in judged] == []
    # queue_growing (a warning) tells each burst's backlog, as it is meant to.
    print(f"healthy day: {kinds.count(FindingKind.QUEUE_GROWING)} queue_growing polls")
    normal = detectors.throughput.normal(
        THRESHOLDS.capacity_min_minutes, window_minutes(THRESHOLDS)
    )
    assert normal is not None and normal.completed_per_minute == 60
    # Day two, 09:30 (steady demand, 40 a minute): 3 of the 6 consumers hang.
    replay(queue, detectors, START + timedelta(days=1, hours=9, minutes=30))
    queue.hung, queue.hung_since = 3, queue.at
    finding = None
    while finding is None and queue.at < queue.hung_since + timedelta(hours=2):
        finding = next(
            (
                f
                for f in detectors.poll(queue.step(), queue)
                if f.kind is FindingKind.QUEUE_CAPACITY_LOST
            ),
            None,
        )
    assert finding is not None
    after = queue.at - queue.hung_since
    print(f"detection queue_capacity_lost, 3 of 6 consumers hung: {after} (window 15m)")
    assert after <= timedelta(hours=1)  # the injected clock's minutes, not a timing
    evidence = evidence_as(finding, CapacityEvidence)
    assert evidence.normal_per_minute == 60 and evidence.completed_per_minute <= 30
    assert evidence.consumers == 6 and evidence.in_flight == 6
    [changed] = evidence.changed
    assert changed.startswith("6 slots busy as usual, completing less: held by slow or hung jobs")
    assert f"(the longest running {after.seconds // 60}m" in changed
    assert (
        "queue reports completes" in finding.summary
        and "50% of its normal 60/min" in finding.summary
    )


def minute(
    completed: int, depth_min: int = 5, depth_last: int = 10, consumers: int | None = None
) -> QueueMinute:
    return QueueMinute(START, completed, 5, depth_last, depth_min, consumers_last=consumers)


def test_a_window_that_ran_dry_or_kept_up_is_never_capacity_lost() -> None:
    normal = ThroughputNormal(60.0, 300, consumers=6.0)
    span = window_minutes(THRESHOLDS)
    low = [minute(10) for _ in range(span)]
    assert detect_capacity_lost("main", "q", THRESHOLDS, low, normal) is not None
    dry = [*low[:-1], minute(10, depth_min=0)]
    assert detect_capacity_lost("main", "q", THRESHOLDS, dry, normal) is None
    kept_up = [minute(10, depth_last=5) for _ in range(span)]
    assert detect_capacity_lost("main", "q", THRESHOLDS, kept_up, normal) is None
    assert detect_capacity_lost("main", "q", THRESHOLDS, low, None) is None  # still learning
    gone = [minute(10, consumers=2) for _ in range(span)]
    found = detect_capacity_lost("main", "q", THRESHOLDS, gone, normal)
    assert found is not None
    assert evidence_as(found, CapacityEvidence).changed == ("consumers gone: 2 alive, usually 6",)

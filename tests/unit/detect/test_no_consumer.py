"""queue_no_consumer: work waiting with no consumer alive past the budget, told
only by sources that tell, folded reading by reading."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from lockwatch.detect.no_consumer import (
    consumer_counts,
    detect_no_consumer,
    unserved_since,
)
from lockwatch.detect.queues import QueueInput, WorkerInput
from lockwatch.model.evidence import ConsumerCount, NoConsumerEvidence
from lockwatch.model.findings import FindingKind, Severity, Subject
from lockwatch.model.queues import QueueSample, WorkerSample
from lockwatch.sample.queues import reading_from_row
from lockwatch.settings.queues import ProcessMatch, QueueThresholds, WorkerGroup
from tests.fixtures.evidence import evidence_as

NOW = datetime(2026, 3, 14, 12, 0, tzinfo=UTC)
BUDGET = 120.0


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def reading(seconds: float, depth: int = 5, consumers: int | None = 0) -> QueueSample:
    return QueueSample(at(seconds), depth, oldest_age_seconds=seconds + 30, consumers=consumers)


def queue(*samples: QueueSample, workers: tuple[WorkerInput, ...] = ()) -> QueueInput:
    return QueueInput("emails", QueueThresholds(no_consumer_after=BUDGET), samples, workers)


def fold(readings: list[QueueSample]) -> datetime | None:
    since = None
    for sample in readings:
        since = unserved_since(since, sample, consumer_counts(sample, ()))
    return since


def test_work_waiting_with_no_consumer_past_the_budget_is_a_finding() -> None:
    readings = [reading(s) for s in range(0, 130, 10)]
    since = fold(readings)
    assert since == NOW
    finding = detect_no_consumer("main", queue(*readings), since, at(125))
    assert finding is not None
    assert finding.kind is FindingKind.QUEUE_NO_CONSUMER
    assert finding.subject == Subject(queue="emails")
    assert finding.severity is Severity.CRITICAL
    assert finding.since == NOW
    evidence = evidence_as(finding, NoConsumerEvidence)
    assert evidence.consumers == (ConsumerCount("library", 0),)
    assert evidence.depth == 5 and evidence.budget_seconds == BUDGET
    assert finding.summary == (
        "queue emails: 5 waiting, the oldest for 2m30s, and no consumer alive for 2m5s "
        "(library: 0 alive)"
    )


def test_not_before_the_budget() -> None:
    readings = [reading(s) for s in range(0, 120, 10)]
    assert detect_no_consumer("main", queue(*readings), fold(readings), at(119)) is None


def test_a_consumer_or_an_empty_queue_starts_the_count_again() -> None:
    assert fold([reading(0), reading(60, consumers=1), reading(70)]) == at(70)
    assert fold([reading(0), reading(60, depth=0), reading(70)]) == at(70)


def test_silence_is_never_read_as_no_consumer() -> None:
    assert fold([reading(s, consumers=None) for s in range(0, 300, 10)]) is None


def test_every_source_that_tells_must_say_none() -> None:
    group = WorkerGroup("mailers", ("emails",), cpu=ProcessMatch(cmdline="mailer"))
    alive = WorkerInput(group, (WorkerSample(at(0), 1.0, processes=2),))
    gone = WorkerInput(group, (WorkerSample(at(0), 1.0, processes=0),))
    sample = reading(0)
    assert unserved_since(None, sample, consumer_counts(sample, (alive,))) is None
    counts = consumer_counts(reading(0, consumers=None), (gone,))
    assert counts == (ConsumerCount("mailers processes", 0),)
    assert unserved_since(None, sample, counts) == NOW


def test_a_preset_reads_consumers_as_a_count() -> None:
    row = {"depth": 3, "consumers": 2}
    assert reading_from_row("emails", row, NOW).consumers == 2
    assert reading_from_row("emails", {"depth": 3}, NOW).consumers is None


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2)), min_size=1, max_size=40))
def test_since_is_the_start_of_the_last_unbroken_run_of_unserved_readings(
    steps: list[tuple[int, int]],
) -> None:
    readings = [reading(10 * i, depth, consumers) for i, (depth, consumers) in enumerate(steps)]
    run_start = None
    for sample in readings:
        unserved = sample.depth > 0 and sample.consumers == 0
        run_start = (run_start or sample.at) if unserved else None
    assert fold(readings) == run_start

"""job_stuck_running from a queue's latest reading: one finding per queue with
stuck jobs, its ids and age, and nothing while none is stuck."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockwatch.detect.queues import QueueInput
from lockwatch.detect.stuck_jobs import SHOWN_IDS, detect_stuck_running
from lockwatch.model.evidence import StuckJobsEvidence
from lockwatch.model.findings import FindingKind, Severity, Subject
from lockwatch.model.queues import QueueSample, StuckJobs
from lockwatch.sample.base import SampleError
from lockwatch.sample.queues import reading_from_row
from lockwatch.settings.queues import QueueThresholds
from tests.fixtures.evidence import evidence_as

NOW = datetime(2026, 3, 14, 12, 0, tzinfo=UTC)


def queue(*samples: QueueSample, name: str = "emails") -> QueueInput:
    return QueueInput(name, QueueThresholds(), samples)


def reading(stuck: StuckJobs | None, at: datetime = NOW, depth: int = 3) -> QueueSample:
    return QueueSample(at, depth, in_flight=1, stuck=stuck)


def test_a_stuck_job_is_reported_with_its_id_and_since_when() -> None:
    taken = NOW - timedelta(minutes=7)
    [finding] = detect_stuck_running("main", [queue(reading(StuckJobs(1, ("41",), taken)))], NOW)
    assert finding.kind is FindingKind.JOB_STUCK_RUNNING
    assert finding.subject == Subject(queue="emails")
    assert finding.severity is Severity.WARNING
    assert finding.since == taken
    assert finding.summary == (
        "queue emails: 1 job(s) marked running whose worker session is gone (41), "
        "the oldest taken 7m ago"
    )
    evidence = evidence_as(finding, StuckJobsEvidence)
    assert (evidence.job_ids, evidence.stuck_count, evidence.depth) == (("41",), 1, 3)


def test_jobs_counted_but_not_named_are_said_to_be_so() -> None:
    [finding] = detect_stuck_running("main", [queue(reading(StuckJobs(1, (), None)))], NOW)
    assert finding.since == NOW
    assert finding.summary == (
        "queue emails: 1 job(s) marked running whose worker session is gone (counted, not"
        " named: which of its running jobs they are cannot be told from what its library"
        " records)"
    )


def test_only_the_latest_reading_counts() -> None:
    earlier = reading(StuckJobs(2, ("1", "2"), NOW), at=NOW - timedelta(seconds=10))
    assert (
        detect_stuck_running("main", [queue(earlier, reading(StuckJobs(0, (), None)))], NOW) == []
    )


def test_a_source_that_cannot_tell_and_an_empty_history_raise_nothing() -> None:
    assert detect_stuck_running("main", [queue(reading(None)), queue(name="idle")], NOW) == []


@given(
    st.lists(st.integers(0, 10**6).map(str), min_size=1, max_size=20, unique=True),
    st.integers(0, 50),
)
def test_the_summary_names_a_few_ids_and_counts_the_rest(ids: list[str], extra: int) -> None:
    stuck = StuckJobs(len(ids) + extra, tuple(ids), None)
    [finding] = detect_stuck_running("main", [queue(reading(stuck))], NOW)
    for job_id in ids[:SHOWN_IDS]:
        assert job_id in finding.summary
    rest = len(ids) + extra - min(len(ids), SHOWN_IDS)
    assert (f"and {rest} more" in finding.summary) == (rest > 0)
    assert finding.since == NOW  # no start known: dated by the reading


def test_a_row_with_stuck_columns_reads_into_the_sample() -> None:
    row = {"depth": 2, "stuck_count": 1, "stuck_job_ids": ["abc"], "stuck_since": NOW}
    assert reading_from_row("emails", row, NOW).stuck == StuckJobs(1, ("abc",), NOW)
    assert reading_from_row("emails", {"depth": 2}, NOW).stuck is None


def test_stuck_columns_of_the_wrong_type_say_so() -> None:
    for column, value in (("stuck_job_ids", "abc"), ("stuck_since", "yesterday")):
        row = {"depth": 2, "stuck_count": 1, column: value}
        with pytest.raises(SampleError, match=column):
            reading_from_row("emails", row, NOW)

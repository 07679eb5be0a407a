"""job_rescued_while_running from consecutive readings of a queue's running
jobs: a job started again after its library's rescue, while a worker of its
first start lives, is reported with both starts until the second one ends;
a retry after a failure its worker reported, a rescue of a dead worker's job,
or a job lockwatch never saw running before is not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockwatch.detect.rescued_jobs import (
    REMEMBERED_RUNS,
    RunMemory,
    detect_rescued_running,
    rescued_runs,
)
from lockwatch.model.evidence import RescuedRunsEvidence
from lockwatch.model.findings import FindingKind, Severity, Subject
from lockwatch.model.queues import QueueJobRun, RunningJobs
from lockwatch.sample.base import SampleError
from lockwatch.sample.queues import reading_from_row
from lockwatch.text import format_duration
from tests.fixtures.evidence import evidence_as

NOW = datetime(2026, 3, 14, 12, 0, tzinfo=UTC)
FIRST = NOW - timedelta(hours=1)


def run(
    attempt: int, *workers: str, job: str = "7", at: datetime = FIRST, rescued: bool = False
) -> QueueJobRun:
    return QueueJobRun(job, attempt, at, workers, rescued)


def readings(*polls: tuple[tuple[QueueJobRun, ...], frozenset[str]]) -> RunMemory:
    memory = RunMemory()
    for runs, live in polls:
        memory = rescued_runs(RunningJobs(runs, live), memory)
    return memory


def test_a_job_rescued_while_its_first_worker_lives_is_reported_with_both_starts() -> None:
    second = NOW - timedelta(seconds=30)
    memory = readings(
        ((run(1, "client-a"),), frozenset({"client-a"})),
        ((run(2, "client-b", at=second, rescued=True),), frozenset({"client-a", "client-b"})),
    )
    finding = detect_rescued_running("main", "emails", memory, NOW)
    assert finding is not None
    assert finding.kind is FindingKind.JOB_RESCUED_WHILE_RUNNING
    assert finding.subject == Subject(queue="emails")
    assert finding.severity is Severity.CRITICAL
    assert finding.since == second
    evidence = evidence_as(finding, RescuedRunsEvidence)
    [job] = evidence.jobs
    assert (job.job_id, job.first.attempt, job.second.attempt) == ("7", 1, 2)
    assert (job.first.workers, job.second.workers, job.alive) == (
        ("client-a",),
        ("client-b",),
        ("client-a",),
    )
    assert f"job 7 started again {format_duration(30.0)} ago (attempt 2)" in finding.summary
    assert "client-a" in finding.summary


def test_the_finding_lasts_while_the_first_starts_handler_is_seen_running() -> None:
    # pg-boss 12.38: worker a fetched the job's batch at 12:00; its handler
    # outran the expiry and holds a while b runs the retry, then the retry is
    # failed too (no longer running) while both handlers go on.
    batch = ("a", "work-1 fetched 12:00")
    first = QueueJobRun("7", 0, FIRST, ("a",), False, handling=(batch,))
    live = frozenset({"a", "b"})
    second = run(1, "b", at=NOW, rescued=True)
    memory = rescued_runs(RunningJobs((first,), live, frozenset({batch})), RunMemory())
    memory = rescued_runs(RunningJobs((second,), live, frozenset({batch})), memory)
    finding = detect_rescued_running("main", "q", memory, NOW)
    assert finding is not None
    assert "the worker of its attempt 0 still handles it past its timeout (a)" in finding.summary
    failed = rescued_runs(RunningJobs((), live, frozenset({batch, ("b", "work-2")})), memory)
    assert detect_rescued_running("main", "q", failed, NOW) is not None, "a still handles it"
    # a's handler returned and a fetched again: the same worker, another batch
    moved_on = RunningJobs((), live, frozenset({("a", "work-1 fetched 12:05")}))
    assert detect_rescued_running("main", "q", rescued_runs(moved_on, failed), NOW) is None
    # a's handler had returned before the retry started: it never ran twice
    memory = rescued_runs(RunningJobs((first,), live, frozenset({batch})), RunMemory())
    done = rescued_runs(RunningJobs((second,), live, frozenset()), memory)
    assert detect_rescued_running("main", "q", done, NOW) is None


def test_workers_the_library_cannot_tell_apart_are_counted_never_named() -> None:
    # pg-boss 10 and 11: the sessions of its time, any of which may run it.
    sessions = tuple(f"pid {n} (pgboss)" for n in range(15))
    first = QueueJobRun("7", 0, FIRST, sessions, False, workers_told=False)
    second = QueueJobRun("7", 1, NOW, sessions, True, workers_told=False)
    live = frozenset(sessions[:12])
    memory = readings(((first,), live), ((second,), live))
    finding = detect_rescued_running("main", "q", memory, NOW)
    assert finding is not None
    [job] = evidence_as(finding, RescuedRunsEvidence).jobs
    assert (job.first.workers, job.second.workers, job.alive, job.alive_count) == ((), (), (), 12)
    assert "pid" not in finding.summary
    assert "no worker per job; 12 of its sessions from then are still connected" in finding.summary
    # every session of its time gone: its first start's handler went with them
    gone = rescued_runs(RunningJobs((second,), frozenset({"pid 99 (pgboss)"})), memory)
    assert detect_rescued_running("main", "q", gone, NOW) is None


def test_one_of_several_workers_is_named_as_one_of_them() -> None:
    memory = readings(
        ((run(1, "a", "b"),), frozenset({"a", "b"})),
        ((run(2, "c", at=NOW, rescued=True),), frozenset({"a", "b", "c"})),
    )
    finding = detect_rescued_running("main", "q", memory, NOW)
    assert finding is not None
    assert "one of the 2 workers that may have run its attempt 1 still lives (a, b;" in (
        finding.summary
    )


def test_the_finding_lasts_while_the_second_start_runs_and_ends_with_it() -> None:
    first = ((run(1, "a"),), frozenset({"a"}))
    second = ((run(2, "a", at=NOW, rescued=True),), frozenset({"a"}))
    memory = readings(first, second, second)
    assert detect_rescued_running("main", "q", memory, NOW) is not None
    done = rescued_runs(RunningJobs((), frozenset({"a"})), memory)
    assert detect_rescued_running("main", "q", done, NOW) is None
    # a third start is a new question, not the same duplicate
    third = rescued_runs(RunningJobs((run(3, "a", at=NOW),), frozenset({"a"})), memory)
    assert detect_rescued_running("main", "q", third, NOW) is None


@pytest.mark.parametrize(
    ("rescued", "live", "why"),
    [
        (False, frozenset({"a"}), "a retry after a failure its worker reported"),
        (True, frozenset({"b"}), "the first start's worker is gone: a rescue, no duplicate"),
    ],
)
def test_no_finding_without_a_rescue_or_without_the_first_worker(
    rescued: bool, live: frozenset[str], why: str
) -> None:
    memory = readings(
        ((run(1, "a"),), frozenset({"a"})),
        ((run(2, "b", at=NOW, rescued=rescued),), live),
    )
    assert detect_rescued_running("main", "q", memory, NOW) is None, why


def test_a_job_never_seen_running_before_is_not_judged() -> None:
    memory = readings(((run(4, "a", at=NOW, rescued=True),), frozenset({"a"})))
    assert detect_rescued_running("main", "q", memory, NOW) is None


def test_a_rescued_job_that_waited_for_its_retry_between_readings_is_still_caught() -> None:
    memory = readings(
        ((run(1, "a"),), frozenset({"a"})),
        ((), frozenset({"a"})),  # moved back to available: not running for a while
        ((run(2, "a", at=NOW, rescued=True),), frozenset({"a"})),
    )
    assert detect_rescued_running("main", "q", memory, NOW) is not None


@given(st.integers(min_value=0, max_value=3 * REMEMBERED_RUNS))
def test_the_memory_of_starts_stays_bounded_keeping_the_latest(jobs: int) -> None:
    runs = tuple(run(1, "a", job=str(i), at=FIRST + timedelta(seconds=i)) for i in range(jobs))
    memory = rescued_runs(RunningJobs(runs, frozenset()), RunMemory())
    assert len(memory.seen) == min(jobs, REMEMBERED_RUNS)
    if jobs:
        assert str(jobs - 1) in memory.seen


def test_a_presets_running_jobs_are_read_and_a_malformed_entry_is_an_error() -> None:
    row = {
        "depth": 0,
        "running_jobs": [
            {
                "id": "7",
                "attempt": 2,
                "started_at": "2026-03-14T17:45:00+05:45",
                "workers": ["a"],
                "rescued": True,
            },
            {
                "id": "8",
                "attempt": 0,
                "started_at": "2026-03-14T17:45:00+05:45",
                "workers": ["a"],
                "rescued": False,
                "handling": [["a", "w1"]],
                "workers_told": False,
            },
        ],
        "live_workers": ["a", "b"],
        "busy_workers": [["a", "w1"]],
    }
    sample = reading_from_row("q", row, NOW)
    eighth = QueueJobRun("8", 0, NOW, ("a",), False, handling=(("a", "w1"),), workers_told=False)
    assert sample.running == RunningJobs(
        (run(2, "a", at=NOW, rescued=True), eighth), frozenset("ab"), frozenset({("a", "w1")})
    )
    with pytest.raises(SampleError, match="busy_workers"):
        reading_from_row("q", {**row, "busy_workers": [["a"]]}, NOW)
    with pytest.raises(SampleError, match="running_jobs"):
        reading_from_row("q", {"depth": 0, "running_jobs": [{"id": "7", "attempt": "2"}]}, NOW)
    assert reading_from_row("q", {"depth": 0}, NOW).running is None

"""Job detectors on synthetic run histories, with the clock pinned."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict, Unpack

from lockwatch.detect.jobs import detect_jobs, run_key_of
from lockwatch.model.evidence.json_form import object_json
from lockwatch.model.findings import FindingKind
from lockwatch.model.jobs import JobRun, RunStatus
from lockwatch.settings.jobs import JobSpec
from lockwatch.settings.schedule import Schedule

NOW = datetime(2026, 11, 29, 3, 30, tzinfo=UTC)
SLOT = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
NIGHTLY = JobSpec("nightly-report", schedule=Schedule("0 3 * * *", grace=600), max_duration=1200)
WATCHING_SINCE = NOW - timedelta(days=3)


def run(
    at: datetime,
    host: str = "app-1",
    *,
    key: str | None = None,
    finished: datetime | None = None,
    status: RunStatus = RunStatus.RUNNING,
    exit_code: int | None = None,
) -> JobRun:
    return JobRun("nightly-report", key, at, finished, status, host, "sql", None, exit_code)


class RunOptions(TypedDict, total=False):
    """What ``done`` passes on to ``run``."""

    key: str | None
    exit_code: int | None


def done(at: datetime, host: str = "app-1", **kwargs: Unpack[RunOptions]) -> JobRun:
    return run(at, host, finished=at + timedelta(minutes=5), status=RunStatus.SUCCESS, **kwargs)


def history() -> list[JobRun]:
    """Three good nights before tonight."""
    return [done(SLOT - timedelta(days=d) + timedelta(seconds=3)) for d in (1, 2, 3)]


def kinds(
    runs: list[JobRun], spec: JobSpec = NIGHTLY, now: datetime = NOW
) -> dict[str, dict[str, Any]]:
    return {
        f.kind.value: object_json(f.evidence) | {"summary": f.summary, "since": f.since}
        for f in detect_jobs(spec, runs, now, target="main", not_before=WATCHING_SINCE)
    }


def test_a_night_with_one_run_gives_nothing() -> None:
    assert kinds([*history(), done(SLOT + timedelta(seconds=4))]) == {}


def test_two_starts_in_one_slot_are_a_duplicate_even_without_run_keys() -> None:
    found = kinds(
        [
            *history(),
            done(SLOT + timedelta(seconds=1), "app-1"),
            done(SLOT + timedelta(seconds=2), "app-2"),
        ]
    )
    duplicate = found["job_duplicate_start"]
    assert duplicate["run_key"] == SLOT.isoformat()
    assert [start["host"] for start in duplicate["starts"]] == ["app-1", "app-2"]
    assert duplicate["since"] == SLOT + timedelta(seconds=2)
    assert "started 2 times" in str(duplicate["summary"])


def test_starts_with_the_same_run_key_in_different_slots_are_duplicates() -> None:
    spec = JobSpec("report", max_duration=None)
    first = done(NOW - timedelta(minutes=20), key="2026-11-28")
    again = done(NOW - timedelta(minutes=5), "app-2", key="2026-11-28")
    assert kinds([first, again], spec)["job_duplicate_start"]["run_key"] == "2026-11-28"


def test_a_duplicate_is_an_event_that_stays_a_finding_for_its_ttl_only() -> None:
    runs = [done(SLOT + timedelta(seconds=1)), done(SLOT + timedelta(seconds=2), "app-2")]
    assert "job_duplicate_start" in kinds(runs, now=SLOT + timedelta(minutes=59))
    assert "job_duplicate_start" not in kinds(runs, now=SLOT + timedelta(minutes=61))


def test_two_runs_in_progress_overlap() -> None:
    found = kinds(
        [run(SLOT + timedelta(seconds=1)), run(SLOT + timedelta(minutes=10), "app-2", key="manual")]
    )
    assert len(found["job_overlap"]["runs"]) == 2


def test_a_slot_without_a_start_is_missed_only_after_its_grace() -> None:
    assert "job_missed" not in kinds(history(), now=SLOT + timedelta(minutes=9))
    missed = kinds(history(), now=SLOT + timedelta(minutes=11))["job_missed"]
    assert missed["slot"] == SLOT.isoformat()
    assert missed["since"] == SLOT + timedelta(minutes=10)


def test_slots_before_lockwatch_knew_the_job_are_never_missed() -> None:
    found = detect_jobs(NIGHTLY, [], NOW, target="main", not_before=NOW - timedelta(minutes=40))
    assert [f.kind for f in found] == [FindingKind.JOB_MISSED]
    assert (
        detect_jobs(NIGHTLY, [], NOW, target="main", not_before=SLOT + timedelta(seconds=1)) == []
    )


def test_a_run_longer_than_its_maximum_is_too_long() -> None:
    long_run = run(SLOT + timedelta(seconds=1))
    assert "job_too_long" not in kinds([long_run], now=SLOT + timedelta(minutes=19))
    assert "job_too_long" in kinds([long_run], now=SLOT + timedelta(minutes=21))


def test_the_last_run_failing_is_reported_until_a_later_success() -> None:
    failed = run(
        SLOT + timedelta(seconds=1),
        finished=SLOT + timedelta(minutes=2),
        status=RunStatus.FAIL,
        exit_code=3,
    )
    found = kinds([*history(), failed])
    assert found["job_failed"]["run"]["exit_code"] == 3
    assert "exit code 3" in str(found["job_failed"]["summary"])
    retried = done(SLOT + timedelta(minutes=3), key="retry")
    assert "job_failed" not in kinds([*history(), failed, retried])


def test_a_job_without_schedule_or_keys_never_counts_as_a_duplicate() -> None:
    spec = JobSpec("adhoc")
    starts = [done(NOW - timedelta(minutes=m)) for m in (1, 2, 3)]
    assert len({run_key_of(spec, start) for start in starts}) == 3
    assert kinds(starts, spec) == {}

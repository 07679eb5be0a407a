"""Pinged runs kept in SQLite (state dir) or a shared PostgreSQL table."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypedDict, Unpack

import pytest

from lockwatch.model.jobs import RunStatus
from lockwatch.state.jobstore import (
    JobStore,
    PingEvent,
    PostgresJobStore,
    SqliteJobStore,
)
from lockwatch.state.pgstore import StoreError
from tests.fixtures.postgres import MONITOR_PASSWORD, PgDatabase

T0 = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path, pg: PgDatabase) -> Iterator[JobStore]:
    made: JobStore
    if request.param == "sqlite":
        made = SqliteJobStore(tmp_path / "state" / "jobs.sqlite3")
    else:
        made = PostgresJobStore(pg.admin_dsn)
    yield made
    made.close()


class PingOptions(TypedDict, total=False):
    """What ``ping`` passes on to PingEvent."""

    run_id: str | None
    run_key: str | None
    host: str | None
    exit_code: int | None
    duration: float | None
    source: str


def ping(event: str, at: datetime, **kwargs: Unpack[PingOptions]) -> PingEvent:
    return PingEvent("nightly", event, at, **kwargs)


def test_a_start_and_its_success_make_one_finished_run(store: JobStore) -> None:
    started = store.record(ping("start", T0, host="app-1", run_key="2026-11-29"))
    finished = store.record(
        ping("success", T0 + timedelta(minutes=5), run_id=started.run_id, exit_code=0)
    )
    (run,) = store.runs("nightly", T0 - timedelta(days=1))
    assert run == finished
    assert run.status is RunStatus.SUCCESS
    assert run.finished_at == T0 + timedelta(minutes=5)
    assert run.run_key == "2026-11-29" and run.host == "app-1" and run.exit_code == 0


def test_a_finish_without_a_run_id_closes_the_latest_run_of_its_host(store: JobStore) -> None:
    store.record(ping("start", T0, host="app-1"))
    store.record(ping("start", T0 + timedelta(seconds=1), host="app-2"))
    store.record(ping("fail", T0 + timedelta(minutes=1), host="app-2", exit_code=3))
    runs = {run.host: run for run in store.runs("nightly", T0 - timedelta(days=1))}
    assert runs["app-1"].running
    assert runs["app-2"].status is RunStatus.FAIL and runs["app-2"].exit_code == 3


def test_a_finish_whose_start_was_lost_is_recorded_whole(store: JobStore) -> None:
    store.record(ping("success", T0 + timedelta(minutes=10), host="app-1", duration=600))
    (run,) = store.runs("nightly", T0 - timedelta(days=1))
    assert run.started_at == T0
    assert run.status is RunStatus.SUCCESS


def test_two_starts_for_one_run_key_are_both_kept(store: JobStore) -> None:
    store.record(ping("start", T0, host="app-1", run_key="2026-11-29"))
    store.record(ping("start", T0 + timedelta(seconds=2), host="app-2", run_key="2026-11-29"))
    assert [run.host for run in store.runs("nightly", T0 - timedelta(days=1))] == ["app-1", "app-2"]


def test_only_runs_since_the_given_time_are_returned(store: JobStore) -> None:
    store.record(ping("start", T0 - timedelta(days=3)))
    store.record(ping("start", T0))
    assert [run.started_at for run in store.runs("nightly", T0 - timedelta(days=1))] == [T0]


def test_a_store_it_cannot_reach_fails_at_use_with_a_clear_error_and_no_password(
    pg: PgDatabase,
) -> None:
    dsn = f"postgresql://someone:{MONITOR_PASSWORD}@127.0.0.1:1/{pg.database}?connect_timeout=2"
    unreachable = PostgresJobStore(dsn)  # opened at first use: lockwatch starts regardless
    with pytest.raises(StoreError) as caught:
        unreachable.runs("nightly", T0)
    assert MONITOR_PASSWORD not in str(caught.value)
    assert "127.0.0.1:1" in str(caught.value)


def test_a_sqlite_store_in_an_unwritable_place_fails_at_use_not_at_start(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    store = SqliteJobStore(blocker / "state" / "jobs.sqlite3")
    with pytest.raises(StoreError, match="job store"):
        store.record(ping("start", T0))
    store.close()

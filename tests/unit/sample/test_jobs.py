"""Rows of an operator's job query read as runs, or a clear error."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from lockwatch.model.jobs import RunStatus
from lockwatch.sample.base import SampleError
from lockwatch.sample.jobs import runs_from_rows

T = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)


def test_a_finished_row_without_status_succeeded_and_an_open_one_runs() -> None:
    done, going = runs_from_rows(
        "nightly",
        [
            {"started_at": T, "finished_at": T, "host": "app-1"},
            {"started_at": T, "run_key": 20261129},
        ],
    )
    assert done.status is RunStatus.SUCCESS and done.host == "app-1"
    assert going.running and going.run_key == "20261129"


@pytest.mark.parametrize(
    ("word", "status"),
    [("FAILED", RunStatus.FAIL), ("done", RunStatus.SUCCESS), ("running", RunStatus.RUNNING)],
)
def test_usual_status_words_are_understood(word: str, status: RunStatus) -> None:
    (run,) = runs_from_rows("nightly", [{"started_at": T, "status": word}])
    assert run.status is status


def test_a_naive_timestamp_is_read_as_utc() -> None:
    (run,) = runs_from_rows("nightly", [{"started_at": T.replace(tzinfo=None)}])
    assert run.started_at == T


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"run_key": "x"}, "must return a started_at column"),
        ({"started_at": None}, "row 1: started_at is NULL"),
        ({"started_at": "yesterday"}, "row 1: started_at must be a timestamp"),
        ({"started_at": T, "status": "exploded?"}, "row 1: unknown status"),
        ({"started_at": T, "exit_code": "x"}, "row 1:"),
    ],
)
def test_a_row_of_the_wrong_shape_says_which_column(row: dict[str, object], message: str) -> None:
    with pytest.raises(SampleError, match=message):
        runs_from_rows("nightly", [row])

"""Job runs read from the application's own tables by an operator's query.

The query returns one row per run: ``started_at`` (required), and any of
``run_key``, ``finished_at``, ``status``, ``host``, ``run_id``, ``exit_code``.
It may use ``%(since)s``, the start of the look-back, to stay cheap. It runs
in lockwatch's read-only session under its statement timeout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from lockwatch.model.jobs import JobRun, RunStatus
from lockwatch.sample.base import SampleError

_STATUS_WORDS = {
    RunStatus.SUCCESS: {"success", "succeeded", "ok", "done", "finished", "completed"},
    RunStatus.FAIL: {"fail", "failed", "failure", "error", "errored", "crashed"},
    RunStatus.RUNNING: {"running", "started", "in_progress", "in progress"},
}
KNOWN_COLUMNS = frozenset(
    {"started_at", "run_key", "finished_at", "status", "host", "run_id", "exit_code"}
)


def _status(value: object, finished: datetime | None) -> RunStatus:
    """Applications name their statuses freely; without one, a finished run succeeded."""
    if value is None:
        return RunStatus.RUNNING if finished is None else RunStatus.SUCCESS
    word = str(value).strip().lower()
    for status, words in _STATUS_WORDS.items():
        if word in words:
            return status
    raise ValueError(
        f"unknown status {word[:40]!r} (use success/fail/running or the usual synonyms)"
    )


def _moment(column: str, value: object) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise ValueError(f"{column} must be a timestamp, got {type(value).__name__}")
    # timestamp without time zone is read as UTC: say so in the docs, not silently guess a zone.
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def runs_from_rows(job: str, rows: Sequence[Mapping[str, Any]]) -> list[JobRun]:
    """Rows of the job query as runs; a row of the wrong shape is an error for the
    whole source, naming the column, so the operator fixes the query."""
    runs = []
    for number, row in enumerate(rows, 1):
        if "started_at" not in row:
            raise SampleError(f"job {job}: the query must return a started_at column")
        try:
            started = _moment("started_at", row["started_at"])
            if started is None:
                raise ValueError("started_at is NULL")
            finished = _moment("finished_at", row.get("finished_at"))
            exit_code = row.get("exit_code")
            runs.append(
                JobRun(
                    job=job,
                    run_key=None if row.get("run_key") is None else str(row["run_key"]),
                    started_at=started,
                    finished_at=finished,
                    status=_status(row.get("status"), finished),
                    host=None if row.get("host") is None else str(row["host"]),
                    source="sql",
                    run_id=None if row.get("run_id") is None else str(row["run_id"]),
                    exit_code=None if exit_code is None else int(exit_code),
                )
            )
        except (TypeError, ValueError) as exc:
            raise SampleError(f"job {job}: row {number}: {exc}") from None
    return runs

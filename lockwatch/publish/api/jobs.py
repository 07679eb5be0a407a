"""``/api/v1/jobs``: every followed job with its counters and latest runs.
Pure: board views in, a JSON-ready document out."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lockwatch.model.jobs import JobRun, JobView
from lockwatch.publish.api.encode import json_safe
from lockwatch.state.board import Board
from lockwatch.state.target_view import TargetView
from lockwatch.text import iso_utc


def _run_entry(run: JobRun) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "run_key": run.run_key,
        "started_at": iso_utc(run.started_at),
        "finished_at": iso_utc(run.finished_at),
        "status": run.status.value,
        "host": run.host,
        "exit_code": run.exit_code,
        "source": run.source,
    }


def _job_entry(job: JobView) -> dict[str, Any]:
    return {
        "name": job.name,
        "source": job.source,
        "starts_total": job.starts_total,
        "duplicate_starts_total": job.duplicate_starts_total,
        "running": job.running,
        "last_start": iso_utc(job.last_start),
        "last_success": iso_utc(job.last_success),
        "last_duration_seconds": None if job.last_duration is None else round(job.last_duration, 3),
        "recent_runs": [_run_entry(run) for run in job.recent],
    }


def jobs_document(views: Board | Iterable[TargetView]) -> dict[str, Any]:
    all_views = views.views() if isinstance(views, Board) else tuple(views)
    document: dict[str, Any] = json_safe(
        {
            "targets": [
                {"target": v.target.name, "jobs": [_job_entry(j) for j in v.jobs]}
                for v in all_views
            ]
        }
    )
    return document

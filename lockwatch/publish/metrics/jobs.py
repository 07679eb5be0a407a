"""Prometheus metrics of the jobs lockwatch follows, rendered from the board.

Job names come from the config, so the series are bounded by it. Their label is
``job_name``: Prometheus owns ``job`` and would rename ours to exported_job.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from lockwatch.publish.metrics.families import Exposition, Family
from lockwatch.state.target_view import TargetView


def job_metrics(views: Iterable[TargetView], scrape: Exposition) -> Iterator[Family]:
    labels = ["target", "job_name"]
    starts = scrape.counter(
        "lockwatch_job_starts", "Starts of the job lockwatch has seen since it started.", labels
    )
    duplicates = scrape.counter(
        "lockwatch_job_duplicate_starts",
        "Starts for a run key that had started already (the job ran twice).",
        labels,
    )
    running = scrape.gauge(
        "lockwatch_job_runs_in_progress", "Runs of the job started and not finished.", labels
    )
    last_start = scrape.gauge(
        "lockwatch_job_last_start_timestamp_seconds", "Unix time of the job's latest start.", labels
    )
    last_success = scrape.gauge(
        "lockwatch_job_last_success_timestamp_seconds",
        "Unix time the job last finished successfully; absent until it has.",
        labels,
    )
    last_duration = scrape.gauge(
        "lockwatch_job_last_duration_seconds", "How long the job's last finished run took.", labels
    )
    for view in views:
        for job in view.jobs:
            names = (view.target.name, job.name)
            starts.add(names, job.starts_total)
            duplicates.add(names, job.duplicate_starts_total)
            running.add(names, job.running)
            if job.last_start is not None:
                last_start.add(names, job.last_start.timestamp())
            if job.last_success is not None:
                last_success.add(names, job.last_success.timestamp())
            if job.last_duration is not None:
                last_duration.add(names, job.last_duration)
    yield from (starts, duplicates, running, last_start, last_success, last_duration)

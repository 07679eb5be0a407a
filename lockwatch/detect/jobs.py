"""Job-run detectors: duplicate starts, overlaps, missed slots, long and failed runs.

Pure: a job's settings, the runs its source reported, and ``now`` in;
findings out. Cron monitors track only the latest run; counting every start
per run key is what catches a job that ran twice (seed 000).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from lockwatch.model.evidence import (
    DuplicateStartEvidence,
    Evidence,
    FailedRunEvidence,
    LongRunEvidence,
    MissedRunEvidence,
    OverlapEvidence,
    RunFacts,
)
from lockwatch.model.findings import Finding, FindingKind, Severity, Subject
from lockwatch.model.jobs import JobRun, RunStatus
from lockwatch.settings.fields import Learned
from lockwatch.settings.jobs import JobSpec
from lockwatch.text import format_duration, format_short_duration, one_line


def run_key_of(spec: JobSpec, run: JobRun) -> str:
    """The run key a start counts against: its own, else its schedule slot,
    else the start itself (so an unscheduled job without keys never duplicates)."""
    if run.run_key:
        return run.run_key
    if spec.schedule is not None:
        return spec.schedule.run_key(run.started_at)
    return f"{run.started_at.isoformat()}/{run.run_id or ''}"


def _run_facts(run: JobRun, now: datetime) -> RunFacts:
    end = run.finished_at or now
    return RunFacts(
        run_key=run.run_key,
        run_id=run.run_id,
        started_at=run.started_at,
        finished_at=run.finished_at,
        status=run.status,
        host=run.host,
        source=run.source,
        exit_code=run.exit_code,
        duration_seconds=round((end - run.started_at).total_seconds(), 1),
        pid=run.pid,
    )


def _finding(
    kind: FindingKind,
    spec: JobSpec,
    target: str,
    severity: Severity,
    since: datetime,
    summary: str,
    evidence: Evidence,
) -> Finding:
    return Finding(kind, target, Subject(job=spec.name), severity, since, summary, evidence)


def _duplicates(
    spec: JobSpec, runs: Sequence[JobRun], target: str, now: datetime
) -> Iterable[Finding]:
    by_key: dict[str, list[JobRun]] = {}
    for run in runs:
        by_key.setdefault(run_key_of(spec, run), []).append(run)
    repeated = {
        key: sorted(group, key=lambda r: r.started_at)
        for key, group in by_key.items()
        if len(group) > 1
    }
    # A duplicate start is an event: it stays a finding for event_ttl after the repeat.
    recent = {
        key: group
        for key, group in repeated.items()
        if now - group[1].started_at <= timedelta(seconds=spec.event_ttl)
    }
    if not recent:
        return
    key, group = max(recent.items(), key=lambda item: item[1][1].started_at)
    hosts = sorted({one_line(run.host or "unknown host") for run in group})
    yield _finding(
        FindingKind.JOB_DUPLICATE_START,
        spec,
        target,
        Severity.CRITICAL,
        group[1].started_at,
        f"job {one_line(spec.name)} started {len(group)} times for run key {one_line(key)}"
        f" (hosts: {', '.join(hosts)}); the second start came "
        f"{format_duration((group[1].started_at - group[0].started_at).total_seconds())} after the first",
        DuplicateStartEvidence(
            job=spec.name,
            run_key=key,
            starts=tuple(_run_facts(run, now) for run in group),
            duplicate_run_keys=tuple(sorted(recent)),
        ),
    )


def _overlap(
    spec: JobSpec, runs: Sequence[JobRun], target: str, now: datetime
) -> Iterable[Finding]:
    running = sorted((run for run in runs if run.running), key=lambda r: r.started_at)
    if len(running) < 2:
        return
    yield _finding(
        FindingKind.JOB_OVERLAP,
        spec,
        target,
        Severity.WARNING,
        running[1].started_at,
        f"{len(running)} runs of job {one_line(spec.name)} are running at once "
        f"(hosts: {', '.join(sorted({one_line(r.host or 'unknown host') for r in running}))})",
        OverlapEvidence(job=spec.name, runs=tuple(_run_facts(run, now) for run in running)),
    )


def _missed(
    spec: JobSpec, runs: Sequence[JobRun], target: str, now: datetime, not_before: datetime
) -> Iterable[Finding]:
    schedule = spec.schedule
    if schedule is None:
        return
    due = schedule.due_slots(max(not_before, now - timedelta(seconds=spec.lookback)), now)
    if not due:
        return
    started = {schedule.slot_of(run.started_at) for run in runs}
    latest = due[-1]
    if latest in started:
        return
    missed = [slot for slot in due if slot not in started]
    last_start = max((run.started_at for run in runs), default=None)
    yield _finding(
        FindingKind.JOB_MISSED,
        spec,
        target,
        Severity.CRITICAL,
        latest + timedelta(seconds=schedule.grace),
        f"job {one_line(spec.name)} did not start for its {latest.isoformat()} slot "
        f"(grace {format_duration(schedule.grace)}); {len(missed)} slot(s) missed in the look-back",
        MissedRunEvidence(
            job=spec.name,
            slot=latest,
            grace_seconds=schedule.grace,
            missed_slots=tuple(missed[-10:]),
            last_start=last_start,
        ),
    )


def learned_duration(spec: JobSpec, runs: Sequence[JobRun]) -> tuple[float, str] | None:
    """The limit learned from the job's successful runs in ``runs``, with
    what they say (``usually 40s, p99 1m over 30 runs``); None while there
    are fewer than ``learning.min_runs`` of them.

    >>> from datetime import UTC
    >>> start = datetime(2026, 1, 1, tzinfo=UTC)
    >>> runs = [JobRun("report", None, start, start + timedelta(seconds=40 + n),
    ...                RunStatus.SUCCESS) for n in range(10)]
    >>> learned_duration(JobSpec("report"), runs)
    (144.0, 'usually 44s, p99 48s over 10 runs')
    """
    durations = sorted(
        (run.finished_at - run.started_at).total_seconds()
        for run in runs
        if run.status is RunStatus.SUCCESS and run.finished_at is not None
    )
    learning = spec.learning
    if len(durations) < learning.min_runs:
        return None
    p50 = durations[(len(durations) - 1) // 2]
    p99 = durations[math.floor(0.99 * (len(durations) - 1))]
    normal = f"usually {format_short_duration(p50)}, p99 {format_short_duration(p99)}"
    return max(learning.factor * p99, learning.floor), f"{normal} over {len(durations)} runs"


def _too_long(
    spec: JobSpec, runs: Sequence[JobRun], target: str, now: datetime
) -> Iterable[Finding]:
    if spec.max_duration is None:
        return
    if isinstance(spec.max_duration, Learned):
        learned = learned_duration(spec, runs)
        if learned is None:
            return  # still learning: no limit yet
        seconds, normal = learned
        limit_text = f"its learned {format_duration(seconds)} ({normal})"
    else:
        seconds = spec.max_duration
        limit_text = f"its {format_duration(seconds)}"
    limit = timedelta(seconds=seconds)
    long_runs = sorted(
        (r for r in runs if r.running and now - r.started_at > limit), key=lambda r: r.started_at
    )
    if not long_runs:
        return
    oldest = long_runs[0]
    yield _finding(
        FindingKind.JOB_TOO_LONG,
        spec,
        target,
        Severity.WARNING,
        oldest.started_at + limit,
        f"job {one_line(spec.name)} has been running {format_duration((now - oldest.started_at).total_seconds())}"
        f" on {one_line(oldest.host or 'unknown host')}, longer than {limit_text}",
        LongRunEvidence(
            job=spec.name,
            max_duration_seconds=seconds,
            runs=tuple(_run_facts(run, now) for run in long_runs),
        ),
    )


def _failed(spec: JobSpec, runs: Sequence[JobRun], target: str, now: datetime) -> Iterable[Finding]:
    """The last ``failures_before_alert`` finished runs all failed (as Sentry
    Crons' failure tolerance): one failed run of a flaky job is no page."""
    finished = sorted(
        (r for r in runs if r.finished_at is not None), key=lambda r: r.finished_at or now
    )
    streak = finished[-spec.failures_before_alert :]
    if len(streak) < spec.failures_before_alert or any(
        r.status is not RunStatus.FAIL for r in streak
    ):
        return
    last = finished[-1]
    assert last.finished_at is not None and streak[0].finished_at is not None
    if now - last.finished_at > timedelta(seconds=spec.event_ttl):
        return
    code = f" with exit code {last.exit_code}" if last.exit_code is not None else ""
    host = one_line(last.host or "unknown host")
    if len(streak) == 1:
        summary = f"the last run of job {one_line(spec.name)} on {host} failed{code}"
    else:
        summary = f"the last {len(streak)} runs of job {one_line(spec.name)} failed, the last on {host}{code}"
    yield _finding(
        FindingKind.JOB_FAILED,
        spec,
        target,
        Severity.WARNING,
        streak[0].finished_at,
        summary,
        FailedRunEvidence(job=spec.name, run=_run_facts(last, now)),
    )


def detect_jobs(
    spec: JobSpec, runs: Sequence[JobRun], now: datetime, *, target: str, not_before: datetime
) -> list[Finding]:
    """Every problem with one job at ``now``, given its runs in the look-back.

    ``not_before`` is when lockwatch began to know the job's history: slots
    before it are never called missed.
    """
    in_range = [run for run in runs if now - run.started_at <= timedelta(seconds=spec.lookback)]
    return [
        *_duplicates(spec, in_range, target, now),
        *_overlap(spec, in_range, target, now),
        *_missed(spec, in_range, target, now, not_before),
        *_too_long(spec, in_range, target, now),
        *_failed(spec, in_range, target, now),
    ]

"""Job-run detectors: duplicate starts, overlaps, missed slots, long and failed runs.

Pure: a job's settings, the runs its source reported, and ``now`` in;
findings out. Cron monitors track only the latest run; counting every start
per run key is what catches a job that ran twice (seed 000).
"""

from __future__ import annotations

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
from lockwatch.settings.jobs import JobSpec
from lockwatch.text import format_duration, one_line


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


def _too_long(
    spec: JobSpec, runs: Sequence[JobRun], target: str, now: datetime
) -> Iterable[Finding]:
    if spec.max_duration is None:
        return
    limit = timedelta(seconds=spec.max_duration)
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
        f" on {one_line(oldest.host or 'unknown host')}, longer than its {format_duration(spec.max_duration)}",
        LongRunEvidence(
            job=spec.name,
            max_duration_seconds=spec.max_duration,
            runs=tuple(_run_facts(run, now) for run in long_runs),
        ),
    )


def _failed(spec: JobSpec, runs: Sequence[JobRun], target: str, now: datetime) -> Iterable[Finding]:
    finished = sorted(
        (r for r in runs if r.finished_at is not None), key=lambda r: r.finished_at or now
    )
    if not finished or finished[-1].status is not RunStatus.FAIL:
        return
    last = finished[-1]
    assert last.finished_at is not None
    if now - last.finished_at > timedelta(seconds=spec.event_ttl):
        return
    code = f" with exit code {last.exit_code}" if last.exit_code is not None else ""
    yield _finding(
        FindingKind.JOB_FAILED,
        spec,
        target,
        Severity.WARNING,
        last.finished_at,
        f"the last run of job {one_line(spec.name)} on {one_line(last.host or 'unknown host')} failed{code}",
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

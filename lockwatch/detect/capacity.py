"""``queue_capacity_lost``: a queue completes much less than it used to while
work waits and its backlog (or its oldest item's age) grows.

A queue that slowly loses consumers (hung on a few jobs, crashed one by one)
stays green on every gauge until it stops; tuist's Oban queues lost half their
slots over days and were caught a day late. The normal is the queue's own:
the median completions per minute over the minutes of ``capacity_learning``
(7 days) that had work waiting all through (a minute that ran dry says what
was asked, not what the workers can do), once there are
``capacity_min_minutes`` of them. The window (``capacity_window``, 15 min)
is judged only when work waited all through it, its completions per minute
are below ``capacity_fraction`` (0.6) of the normal, and the backlog or the
oldest item's age grew over it. The finding says what changed against the
normal: consumers gone, slots busy as usual yet completing less (jobs held
by a few slow or hung runs), or neither told.

Pure: the minutes (``state/throughput.py`` folds readings into them) and the
normal come in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from lockwatch.model.evidence import CapacityEvidence, WorkerFacts
from lockwatch.model.findings import Finding, FindingKind, Severity, Subject
from lockwatch.model.queues import QueueMinute, ThroughputNormal
from lockwatch.settings.queues import QueueThresholds
from lockwatch.text import format_duration, one_line


def window_minutes(thresholds: QueueThresholds) -> int:
    return max(1, round(thresholds.capacity_window / 60))


def _changed(evidence: CapacityEvidence) -> tuple[str, ...]:
    """What is different from the normal, in words."""
    changed = []
    if (
        evidence.consumers is not None
        and evidence.consumers_normal
        and evidence.consumers < evidence.consumers_normal
    ):
        changed.append(
            f"consumers gone: {evidence.consumers} alive, usually {evidence.consumers_normal:g}"
        )
    if evidence.in_flight is not None and evidence.in_flight_normal:
        if evidence.in_flight >= evidence.in_flight_normal:
            held = f"{evidence.in_flight} slots busy as usual, completing less: held by slow or hung jobs"
            if evidence.longest_job_seconds is not None:
                held += f" (the longest running {format_duration(evidence.longest_job_seconds)})"
            changed.append(held)
        else:
            changed.append(
                f"busy slots down to {evidence.in_flight}, usually {evidence.in_flight_normal:g}"
            )
    for worker in evidence.workers:
        for wait in worker.waiting_on[:1]:
            changed.append(
                f"{wait.sessions} session(s) of {one_line(worker.name)} wait on lock "
                f"{one_line(wait.lock)}"
            )
    return tuple(changed)


def _grew(minutes: Sequence[QueueMinute]) -> bool:
    first, last = minutes[0], minutes[-1]
    if last.depth_last > first.depth_first:
        return True
    ages = (first.oldest_age_last, last.oldest_age_last)
    return ages[0] is not None and ages[1] is not None and ages[1] > ages[0]


def detect_capacity_lost(
    target: str,
    queue: str,
    thresholds: QueueThresholds,
    minutes: Sequence[QueueMinute],
    normal: ThroughputNormal | None,
    longest_job_seconds: float | None = None,
    workers: tuple[WorkerFacts, ...] = (),
) -> Finding | None:
    """The queue's finding while its window completes far below its normal."""
    span = window_minutes(thresholds)
    window = tuple(minutes[-span:])
    if normal is None or normal.completed_per_minute <= 0 or len(window) < span:
        return None
    if any(m.depth_min == 0 for m in window) or not _grew(window):
        return None  # it ran dry (demand set the pace), or it keeps up
    rate = sum(m.completed for m in window) / span
    if rate >= thresholds.capacity_fraction * normal.completed_per_minute:
        return None
    last = window[-1]
    evidence = CapacityEvidence(
        queue=queue,
        completed_per_minute=round(rate, 3),
        normal_per_minute=round(normal.completed_per_minute, 3),
        fraction=thresholds.capacity_fraction,
        window_seconds=thresholds.capacity_window,
        learned_minutes=normal.minutes,
        depth_at_window_start=window[0].depth_first,
        depth=last.depth_last,
        oldest_age_seconds=last.oldest_age_last,
        consumers=last.consumers_last,
        consumers_normal=normal.consumers,
        in_flight=last.in_flight_last,
        in_flight_normal=normal.in_flight,
        longest_job_seconds=longest_job_seconds,
        changed=(),
        workers=workers,
    )
    evidence = replace(evidence, changed=_changed(evidence))
    return Finding(
        FindingKind.QUEUE_CAPACITY_LOST,
        target,
        Subject(queue=queue),
        Severity.WARNING,
        window[0].start,
        _summary(evidence),
        evidence,
    )


def _summary(evidence: CapacityEvidence) -> str:
    share = evidence.completed_per_minute / evidence.normal_per_minute
    age = ""
    if evidence.oldest_age_seconds is not None:
        age = f", the oldest waiting {format_duration(evidence.oldest_age_seconds)}"
    text = (
        f"queue {one_line(evidence.queue)} completes {evidence.completed_per_minute:g}/min over "
        f"{format_duration(evidence.window_seconds)}, {share:.0%} of its normal "
        f"{evidence.normal_per_minute:g}/min while work waits: backlog "
        f"{evidence.depth_at_window_start} -> {evidence.depth}{age}"
    )
    return f"{text}; {'; '.join(evidence.changed)}" if evidence.changed else text

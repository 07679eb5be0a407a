"""Queue detectors: ``queue_growing`` and ``queue_stalled``, over each queue's
window of samples, its worker groups' CPU, and the same poll's locks.

Pure: the histories, the lock snapshot, the lock findings and ``now`` come
in; findings, and what could not be judged, go out.

A queue is judged once lockwatch has watched it for most of its window
(:data:`COVERAGE`); until then, and while a source it needs fails, its
findings are *undecided*: active ones stay, none fire.

- ``queue_growing``: the least-squares slope of the depth over the window is
  at least ``min_growth`` per second, the line explains the points
  (R² >= :data:`MIN_FIT`, so noise and a burst do not count), and the depth
  ended higher than it began.
- ``queue_stalled``: there was pending work all through the window and it did
  not drain (the slope is above ``-min_growth``), and nothing makes progress:
  ``completed_total``, when the queue reports it, did not grow at all;
  otherwise the bound worker groups used less than ``stall_cpu`` cores
  together. A queue with neither signal is never called stalled. Nor is one
  whose workers are starved: they used less than ``stall_cpu`` but, with the
  time they were runnable and waited on a run queue for a CPU, wanted at
  least that much (a host or cgroup short of CPU, not workers waiting on a
  lock); the evidence says which (``cpu_state``: starved or waiting), and
  ``queue_growing`` still tells a growing queue.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise
from typing import TypeVar

from lockwatch.detect.queue_locks import LockContext, chain_text, lock_chain, waiting_on
from lockwatch.detect.worker_cpu import cpu_cores, cpu_state, cpu_wait_cores, per_second
from lockwatch.model.evidence import (
    SESSION_STATES,
    STARVED,
    WAITING,
    QueueEvidence,
    QueueLockChain,
    QueueStallEvidence,
    SessionCounts,
    WorkerFacts,
)
from lockwatch.model.findings import Finding, FindingKind, Related, Severity, Subject
from lockwatch.model.locks import Backend
from lockwatch.model.queues import QueueSample, WorkerSample
from lockwatch.settings.queues import QueueThresholds, WorkerGroup
from lockwatch.text import format_duration, one_line

COVERAGE = 0.8  # share of the window the samples must span before a queue is judged
MIN_SAMPLES = 3
MIN_FIT = 0.5  # R² of the depth's straight line below which growth is noise

S = TypeVar("S", QueueSample, WorkerSample)


@dataclass(frozen=True, slots=True)
class Fit:
    slope: float  # depth per second
    r2: float  # share of the depth's variance the line explains, 0..1


def fit_line(points: Sequence[tuple[float, float]]) -> Fit | None:
    """Least-squares line through (x, y) points; None with fewer than two x values.

    >>> fit_line([(0, 1), (1, 3), (2, 5)])
    Fit(slope=2.0, r2=1.0)
    >>> fit_line([(0, 4), (1, 4)])
    Fit(slope=0.0, r2=0.0)
    >>> fit_line([(5, 1)]) is None
    True
    """
    n = len(points)
    if n < 2:
        return None
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in points)
    syy = sum((y - mean_y) ** 2 for _, y in points)
    r2 = 0.0 if syy == 0 else min(1.0, sxy * sxy / (sxx * syy))
    return Fit(sxy / sxx, r2)


def in_window(samples: Iterable[S], now: datetime, window: float) -> tuple[S, ...]:
    return tuple(s for s in samples if (now - s.at).total_seconds() <= window)


def covered(samples: Sequence[QueueSample] | Sequence[WorkerSample], window: float) -> bool:
    if len(samples) < MIN_SAMPLES:
        return False
    return (samples[-1].at - samples[0].at).total_seconds() >= COVERAGE * window


def growth(samples: Sequence[QueueSample]) -> Fit | None:
    if not samples:
        return None
    start = samples[0].at
    return fit_line([((s.at - start).total_seconds(), float(s.depth)) for s in samples])


def completed_in(samples: Sequence[QueueSample]) -> int | None:
    """Items completed across the samples: only increases count, so a count
    that drops (finished rows cleaned up, a worker leaving) is no progress.
    None unless every sample reports ``completed_total``."""
    totals = [s.completed_total for s in samples if s.completed_total is not None]
    if not totals or len(totals) != len(samples):
        return None
    return sum(max(0, b - a) for a, b in pairwise(totals))


def session_state(backend: Backend) -> str:
    if backend.waiting_on_lock:
        return "waiting_lock"
    if backend.state == "active":
        return "active"
    if backend.state == "idle":
        return "idle"
    if backend.state is not None and backend.state.startswith("idle in transaction"):
        return "idle_in_transaction"
    return "other"


def session_counts(sessions: Iterable[Backend]) -> dict[str, int]:
    counts = dict.fromkeys(SESSION_STATES, 0)
    for backend in sessions:
        counts[session_state(backend)] += 1
    return counts


@dataclass(frozen=True, slots=True)
class WorkerInput:
    group: WorkerGroup
    cpu: tuple[WorkerSample, ...] = ()  # its history; windowed per queue here
    sessions: tuple[Backend, ...] | None = None  # the latest reading; None: not bound or unknown


@dataclass(frozen=True, slots=True)
class QueueInput:
    name: str
    thresholds: QueueThresholds
    samples: tuple[QueueSample, ...]
    workers: tuple[WorkerInput, ...] = ()


@dataclass(frozen=True, slots=True)
class QueueVerdicts:
    findings: tuple[Finding, ...]
    undecided: frozenset[tuple[FindingKind, Subject]]


def _rate(slope: float) -> str:
    """
    >>> _rate(0.5), _rate(12.345), _rate(-0.02)
    ('+0.5/s', '+12/s', '-0.02/s')
    """
    return f"{slope:+.2g}/s" if abs(slope) < 10 else f"{slope:+.0f}/s"


def _percent(cores: float) -> str:
    return f"{cores * 100:.1f}% of a core"


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def worker_facts(
    worker: WorkerInput, now: datetime, thresholds: QueueThresholds, context: LockContext
) -> WorkerFacts:
    cpu = in_window(worker.cpu, now, thresholds.window)
    whole = covered(cpu, thresholds.window)
    cores = cpu_cores(cpu) if whole else None
    waited = cpu_wait_cores(cpu) if whole else None
    sessions = worker.sessions
    return WorkerFacts(
        name=worker.group.name,
        processes=cpu[-1].processes if cpu else None,
        cpu_cores=_rounded(cores),
        sessions=None if sessions is None else SessionCounts(**session_counts(sessions)),
        waiting_on=waiting_on(sessions or (), context.snapshot, context.settings),
        cpu_wait_cores=_rounded(waited),
        runnable=cpu[-1].runnable if cpu else None,
        host_cpu_pressure=_rounded(per_second(cpu, "host_pressure_seconds")) if whole else None,
        cpu_state=cpu_state(cores, waited, thresholds.stall_cpu),
    )


@dataclass(frozen=True, slots=True)
class QueueWindow:
    """One queue over its window, once its samples cover it."""

    samples: tuple[QueueSample, ...]
    fit: Fit
    completed: int | None  # items completed in the window; None: not reported
    cpu_bound: bool  # a bound worker group has a CPU source
    cores: float | None  # those groups' cores together, once all their readings cover the window
    waited: float | None = None  # their run-queue time as cores; None: not told by every one

    @property
    def first(self) -> QueueSample:
        return self.samples[0]

    @property
    def last(self) -> QueueSample:
        return self.samples[-1]


def queue_window(queue: QueueInput, now: datetime) -> QueueWindow | None:
    """The queue's window, or None while its samples do not cover it."""
    window = queue.thresholds.window
    samples = in_window(queue.samples, now, window)
    if not covered(samples, window):
        return None
    fit = growth(samples)
    assert fit is not None  # covered: at least three samples over a positive span
    cpu_groups = [w for w in queue.workers if w.group.cpu is not None]
    cores: float | None = None
    waited: float | None = None
    if cpu_groups:
        windows = [in_window(w.cpu, now, window) for w in cpu_groups]
        if all(covered(cpu, window) for cpu in windows):
            cores = sum(cpu_cores(cpu) or 0.0 for cpu in windows)
            waits = [cpu_wait_cores(cpu) for cpu in windows]
            waited = None if None in waits else sum(w or 0.0 for w in waits)
    return QueueWindow(samples, fit, completed_in(samples), bool(cpu_groups), cores, waited)


def _growing(window: QueueWindow, thresholds: QueueThresholds) -> bool:
    fit = window.fit
    return (
        fit.slope >= thresholds.min_growth
        and fit.r2 >= MIN_FIT
        and window.last.depth > window.first.depth
    )


def _pending(window: QueueWindow, thresholds: QueueThresholds) -> bool:
    """Whether there was pending work all through the window, and it did not drain."""
    return min(s.depth for s in window.samples) > 0 and window.fit.slope > -thresholds.min_growth


def _stalled_because(window: QueueWindow, thresholds: QueueThresholds) -> str | None:
    """Why the queue is stalled; None when it is not, or cannot be told (``_undecided``)."""
    if not _pending(window, thresholds):
        return None
    state = cpu_state(window.cores, window.waited, thresholds.stall_cpu)
    if state == STARVED:
        return None  # they want a CPU and do not get it: starved, not stalled
    span = format_duration(thresholds.window)
    if window.completed is not None:
        return f"nothing completed in {span}" if window.completed == 0 else None
    if window.cores is not None and window.cores < thresholds.stall_cpu:
        because = f"its workers used {_percent(window.cores)} over {span}"
        if state == WAITING and window.waited is not None:
            because += f", waiting (not for a CPU: {_percent(window.waited)} on a run queue)"
        return because
    return None


def _undecided(window: QueueWindow, thresholds: QueueThresholds) -> bool:
    """Whether a stall waits on worker CPU readings that do not cover the window yet."""
    return (
        _pending(window, thresholds)
        and window.completed is None
        and window.cpu_bound
        and window.cores is None
    )


def _queue_evidence(
    queue: QueueInput, window: QueueWindow, now: datetime, context: LockContext
) -> QueueEvidence:
    thresholds = queue.thresholds
    return QueueEvidence(
        queue=queue.name,
        depth=window.last.depth,
        depth_at_window_start=window.first.depth,
        oldest_age_seconds=window.last.oldest_age_seconds,
        in_flight=window.last.in_flight,
        growth_per_second=round(window.fit.slope, 4),
        fit_r2=round(window.fit.r2, 3),
        window_seconds=thresholds.window,
        samples=len(window.samples),
        completed_total=window.last.completed_total,
        completed_in_window=window.completed,
        worker_cpu_cores=_rounded(window.cores),
        stall_cpu_cores=thresholds.stall_cpu,
        workers=tuple(worker_facts(w, now, thresholds, context) for w in queue.workers),
        worker_cpu_wait_cores=_rounded(window.waited),
        worker_cpu_state=cpu_state(window.cores, window.waited, thresholds.stall_cpu),
    )


def _growth_summary(queue: QueueInput, window: QueueWindow) -> str:
    summary = (
        f"queue {one_line(queue.name)} grew {_rate(window.fit.slope)} from {window.first.depth} "
        f"to {window.last.depth} over {format_duration(queue.thresholds.window)}"
    )
    if window.cores is not None:
        summary += f"; its workers used {_percent(window.cores)}"
    if cpu_state(window.cores, window.waited, queue.thresholds.stall_cpu) == STARVED:
        assert window.waited is not None  # told STARVED
        summary += (
            f" and waited {_percent(window.waited)} on a run queue: starved of CPU, not stalled"
        )
    return summary


def _stall_summary(
    queue: QueueInput,
    window: QueueWindow,
    growing: bool,
    because: str,
    chain: QueueLockChain | None,
) -> str:
    trend = _rate(window.fit.slope) if growing else "not draining"
    summary = (
        f"queue {one_line(queue.name)} stalled: {window.last.depth} pending ({trend}), {because}"
    )
    return summary if chain is None else f"{summary}; {chain_text(chain)}"


def _judge(
    queue: QueueInput, now: datetime, context: LockContext, target: str
) -> tuple[list[Finding], set[FindingKind]]:
    """Findings for one queue, and the kinds it cannot judge now."""
    window = queue_window(queue, now)
    if window is None:
        # Undecided until the window is covered; job_stuck_running needs none.
        return [], {FindingKind.QUEUE_GROWING, FindingKind.QUEUE_STALLED}
    thresholds = queue.thresholds
    growing = _growing(window, thresholds)
    stalled_because = _stalled_because(window, thresholds)
    undecided = {FindingKind.QUEUE_STALLED} if _undecided(window, thresholds) else set()
    evidence = _queue_evidence(queue, window, now, context)
    subject = Subject(queue=queue.name)
    since = window.first.at
    findings = []
    if growing:
        stalled = stalled_because is not None
        findings.append(
            Finding(
                FindingKind.QUEUE_GROWING,
                target,
                subject,
                Severity.WARNING,
                since,
                _growth_summary(queue, window),
                evidence,
                (Related(FindingKind.QUEUE_STALLED, target, subject),) if stalled else (),
            )
        )
    if stalled_because is not None:
        bound = [(w.group.name, w.sessions) for w in queue.workers if w.sessions is not None]
        chain, lock_related = lock_chain(bound, now, context)
        grew = (Related(FindingKind.QUEUE_GROWING, target, subject),) if growing else ()
        findings.append(
            Finding(
                FindingKind.QUEUE_STALLED,
                target,
                subject,
                Severity.CRITICAL,
                since,
                _stall_summary(queue, window, growing, stalled_because, chain),
                QueueStallEvidence.of(evidence, chain),
                grew + lock_related,
            )
        )
    return findings, undecided


def detect_queues(
    target: str, queues: Sequence[QueueInput], context: LockContext, now: datetime
) -> QueueVerdicts:
    """Every queue problem visible at ``now``, in the order of ``queues``."""
    findings: list[Finding] = []
    undecided: set[tuple[FindingKind, Subject]] = set()
    for queue in queues:
        found, unsure = _judge(queue, now, context, target)
        findings.extend(found)
        undecided.update((kind, Subject(queue=queue.name)) for kind in unsure)
    return QueueVerdicts(tuple(findings), frozenset(undecided))

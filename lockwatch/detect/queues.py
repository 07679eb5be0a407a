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
  together. A queue with neither signal is never called stalled.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise
from typing import Any, TypeVar

from lockwatch.detect.evidence import backend_facts
from lockwatch.model.findings import Finding, FindingKind, Severity, Subject
from lockwatch.model.locks import Backend, LockKey, LockSnapshot
from lockwatch.model.queues import QueueSample, SessionWait, WorkerSample
from lockwatch.settings.locks import LockSettings
from lockwatch.settings.queues import QueueThresholds, WorkerGroup
from lockwatch.text import format_duration, one_line

COVERAGE = 0.8  # share of the window the samples must span before a queue is judged
MIN_SAMPLES = 3
MIN_FIT = 0.5  # R² of the depth's straight line below which growth is noise
QUEUE_KINDS = (FindingKind.QUEUE_GROWING, FindingKind.QUEUE_STALLED)
SESSION_STATES = ("active", "waiting_lock", "idle", "idle_in_transaction", "other")

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


def cpu_cores(samples: Sequence[WorkerSample]) -> float | None:
    """Average cores used between the first and last sample."""
    if len(samples) < 2:
        return None
    seconds = (samples[-1].at - samples[0].at).total_seconds()
    if seconds <= 0:
        return None
    return max(0.0, samples[-1].cpu_seconds - samples[0].cpu_seconds) / seconds


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


def lock_label(database: str, key: LockKey, settings: LockSettings) -> str:
    named = settings.named_lock(database, key)
    return named.name if named is not None else key.render()


def waiting_on(
    sessions: Iterable[Backend], snapshot: LockSnapshot | None, settings: LockSettings
) -> tuple[SessionWait, ...]:
    """The advisory locks these sessions wait on, most waiters first."""
    if snapshot is None:
        return ()
    pids = {backend.pid for backend in sessions}
    waits: dict[tuple[str, LockKey], int] = {}
    for lock in snapshot.locks:
        if not lock.granted and lock.pid in pids:
            waits[lock.database, lock.key] = waits.get((lock.database, lock.key), 0) + 1
    ordered = sorted(waits.items(), key=lambda item: (-item[1], item[0]))
    return tuple(
        SessionWait(database, lock_label(database, key, settings), key.render(), count)
        for (database, key), count in ordered
    )


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
class LockContext:
    """The same poll's advisory locks, to explain a stall."""

    snapshot: LockSnapshot | None
    settings: LockSettings
    findings: tuple[Finding, ...] = ()


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


def _worker_facts(
    worker: WorkerInput, now: datetime, window: float, context: LockContext
) -> dict[str, Any]:
    cpu = in_window(worker.cpu, now, window)
    cores = cpu_cores(cpu) if covered(cpu, window) else None
    sessions = worker.sessions
    return {
        "name": worker.group.name,
        "processes": cpu[-1].processes if cpu else None,
        "cpu_cores": None if cores is None else round(cores, 4),
        "sessions": None if sessions is None else session_counts(sessions),
        "waiting_on": [
            {"database": w.database, "lock": w.lock, "key": w.key, "sessions": w.sessions}
            for w in (waiting_on(sessions or (), context.snapshot, context.settings))
        ],
    }


def _lock_chain(
    queue: QueueInput, now: datetime, context: LockContext
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The advisory lock most of the queue's worker sessions wait on, its
    holders, and the lock findings about it."""
    snapshot = context.snapshot
    bound = [w for w in queue.workers if w.sessions is not None]
    if snapshot is None or not bound:
        return None, []
    sessions = [backend for w in bound for backend in w.sessions or ()]
    waits = waiting_on(sessions, snapshot, context.settings)
    if not waits:
        return None, []
    wait = waits[0]
    key = LockKey.parse(wait.key)
    group_of = {backend.pid: w.group.name for w in bound for backend in w.sessions or ()}
    holders = []
    for lock in sorted(snapshot.holders(wait.database, key), key=lambda lock: lock.pid):
        facts = backend_facts(snapshot.backends.get(lock.pid), lock.pid, now)
        facts["held_seconds"] = (
            None
            if lock.first_seen is None
            else round(max(0.0, (now - lock.first_seen).total_seconds()), 1)
        )
        facts["worker_group"] = group_of.get(lock.pid)
        holders.append(facts)
    subject = Subject(wait.database, wait.lock)
    related = [
        {"kind": f.kind.value, "subject": f.subject.as_dict()}
        for f in context.findings
        if f.subject == subject
    ]
    chain = {
        "database": wait.database,
        "lock": wait.lock,
        "key": wait.key,
        "waiting_sessions": wait.sessions,
        "worker_sessions": len(sessions),
        "holders": holders,
    }
    return chain, related


def _chain_text(chain: dict[str, Any]) -> str:
    label = chain["lock"] if chain["lock"] == chain["key"] else f"{chain['lock']} ({chain['key']})"
    text = (
        f"{chain['waiting_sessions']} of {chain['worker_sessions']} worker sessions wait on "
        f"lock {one_line(label)}"
    )
    holders = chain["holders"]
    if not holders:
        return text + ", holder not seen"
    holder = holders[0]
    where = one_line(holder["client_addr"]) if holder["client_addr"] else "local socket"
    text += (
        f" held by pid {holder['pid']} "
        f"({one_line(holder['application_name'] or 'no application_name')} from {where})"
    )
    if holder["state_seconds"] is not None and holder["state"] != "active":
        text += f" {one_line(holder['state'])} {format_duration(holder['state_seconds'])}"
    if holder["query"]:
        text += f' since "{one_line(holder["query"])}"'
    return text


def _judge(
    queue: QueueInput, now: datetime, context: LockContext, target: str
) -> tuple[list[Finding], set[FindingKind]]:
    """Findings for one queue, and the kinds it cannot judge now."""
    thresholds = queue.thresholds
    window = thresholds.window
    samples = in_window(queue.samples, now, window)
    if not covered(samples, window):
        return [], set(QUEUE_KINDS)
    fit = growth(samples)
    assert fit is not None  # covered: at least three samples over a positive span
    first, last = samples[0], samples[-1]
    growing = fit.slope >= thresholds.min_growth and fit.r2 >= MIN_FIT and last.depth > first.depth
    undecided: set[FindingKind] = set()
    stalled_because: str | None = None
    pending = min(s.depth for s in samples) > 0 and fit.slope > -thresholds.min_growth
    completed = completed_in(samples)
    cpu_groups = [w for w in queue.workers if w.group.cpu is not None]
    cores: float | None = None
    if cpu_groups:
        windows = [in_window(w.cpu, now, window) for w in cpu_groups]
        if all(covered(cpu, window) for cpu in windows):
            cores = sum(cpu_cores(cpu) or 0.0 for cpu in windows)
    if pending:
        if completed is not None:
            if completed == 0:
                stalled_because = f"nothing completed in {format_duration(window)}"
        elif cpu_groups and cores is None:
            undecided.add(FindingKind.QUEUE_STALLED)
        elif cores is not None and cores < thresholds.stall_cpu:
            stalled_because = f"its workers used {_percent(cores)} over {format_duration(window)}"
    subject = Subject(queue=queue.name)
    evidence: dict[str, Any] = {
        "queue": queue.name,
        "depth": last.depth,
        "depth_at_window_start": first.depth,
        "oldest_age_seconds": last.oldest_age_seconds,
        "in_flight": last.in_flight,
        "growth_per_second": round(fit.slope, 4),
        "fit_r2": round(fit.r2, 3),
        "window_seconds": window,
        "samples": len(samples),
        "completed_total": last.completed_total,
        "completed_in_window": completed,
        "worker_cpu_cores": None if cores is None else round(cores, 4),
        "stall_cpu_cores": thresholds.stall_cpu,
        "workers": [_worker_facts(w, now, window, context) for w in queue.workers],
    }
    growth_text = (
        f"grew {_rate(fit.slope)} from {first.depth} to {last.depth} over {format_duration(window)}"
    )
    findings = []
    kinds: list[FindingKind] = []
    if growing:
        kinds.append(FindingKind.QUEUE_GROWING)
    if stalled_because is not None:
        kinds.append(FindingKind.QUEUE_STALLED)
    for kind in kinds:
        related = [
            {"kind": other.value, "subject": subject.as_dict()} for other in kinds if other != kind
        ]
        facts = dict(evidence)
        if kind is FindingKind.QUEUE_STALLED:
            chain, lock_related = _lock_chain(queue, now, context)
            facts["lock"] = chain
            related += lock_related
            trend = _rate(fit.slope) if growing else "not draining"
            summary = (
                f"queue {one_line(queue.name)} stalled: {last.depth} pending ({trend}), "
                f"{stalled_because}"
            )
            if chain is not None:
                summary += "; " + _chain_text(chain)
            severity = Severity.CRITICAL
        else:
            summary = f"queue {one_line(queue.name)} {growth_text}"
            if cores is not None:
                summary += f"; its workers used {_percent(cores)}"
            severity = Severity.WARNING
        facts["related"] = related
        findings.append(Finding(kind, target, subject, severity, first.at, summary, facts))
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

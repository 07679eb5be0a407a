"""A target's queues and worker groups: their sources, their bounded histories,
and the queue detectors run over them at each poll."""

from __future__ import annotations

import logging
import re
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

from lockwatch.detect.capacity import detect_capacity_lost, window_minutes
from lockwatch.detect.freshness import is_stale
from lockwatch.detect.long_jobs import detect_long_jobs, longest_running
from lockwatch.detect.no_consumer import consumer_counts, detect_no_consumer, unserved_since
from lockwatch.detect.queue_locks import LockContext, waiting_on
from lockwatch.detect.queues import (
    QueueInput,
    S,
    WorkerInput,
    covered,
    detect_queues,
    growth,
    in_window,
    session_counts,
    worker_facts,
)
from lockwatch.detect.rescued_jobs import RunMemory, detect_rescued_running, rescued_runs
from lockwatch.detect.sources import detect_source_down
from lockwatch.detect.stuck_jobs import detect_stuck_running
from lockwatch.detect.worker_cpu import cpu_cores
from lockwatch.model.findings import Family, Finding, FindingKind, Subject
from lockwatch.model.locks import Backend
from lockwatch.model.queues import QueueSample, QueueView, WorkerSample, WorkerView
from lockwatch.monitors.base import (
    Monitor,
    MonitorResult,
    PollContext,
    Sampled,
    StateDocument,
    undecided_while_down,
)
from lockwatch.sample.base import SampleContext, Source, SourceRunner
from lockwatch.sample.queues import SqlQueueSampler
from lockwatch.sample.workers import (
    CgroupCpuSampler,
    ProcessCpuSampler,
    PrometheusCpuSampler,
    SessionSampler,
)
from lockwatch.settings.queues import (
    CgroupCpu,
    ProcessMatch,
    Queue,
    RedisQueueSource,
    SqlQueueSource,
    WorkerGroup,
)
from lockwatch.settings.targets import Target
from lockwatch.state.target_view import TargetView
from lockwatch.state.throughput import QueueThroughput

log = logging.getLogger(__name__)

R = TypeVar("R")

# Samples kept per queue and group whatever the window: 2 hours at 1 s.
MAX_HISTORY = 7200
THROUGHPUT = "queue_throughput"  # the state file's section of the learned normals
SAVE_EVERY = timedelta(minutes=10)


def glob_regex(pattern: str) -> re.Pattern[str]:
    """An application_name pattern (``*`` and ``?``) as a regular expression.

    >>> bool(glob_regex("webhook-worker-*").fullmatch("webhook-worker-12"))
    True
    >>> bool(glob_regex("a?c").fullmatch("a.c")), bool(glob_regex("a.c").fullmatch("abc"))
    (True, False)
    """
    return re.compile(
        "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern),
        re.DOTALL,
    )


def queue_source(queue: Queue) -> Source[dict[str, QueueSample]]:
    if isinstance(queue.source, SqlQueueSource):
        return SqlQueueSampler(queue)
    assert isinstance(queue.source, RedisQueueSource)
    from lockwatch.sample.redis import RedisQueueSampler  # redis-py: only for a Redis queue

    return RedisQueueSampler(queue)


def cpu_source(group: WorkerGroup) -> Source[WorkerSample] | None:
    spec = group.cpu
    if spec is None:
        return None
    if isinstance(spec, ProcessMatch):
        return ProcessCpuSampler(spec)
    if isinstance(spec, CgroupCpu):
        return CgroupCpuSampler(spec)
    return PrometheusCpuSampler(spec)


class QueueMonitor:
    """Samples a target's queues and worker groups and judges its queues."""

    kinds = FindingKind.of(Family.QUEUES)

    def __init__(
        self,
        target: Target,
        *,
        make_cpu_source: Callable[[WorkerGroup], Source[WorkerSample] | None] = cpu_source,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.target = target

        def runner(name: str, source: Source[R], interval: float | None) -> SourceRunner[R]:
            return SourceRunner(
                target.name, name, source, interval, target.interval, monotonic=monotonic
            )

        self._queues = [
            (queue, runner(f"queue/{queue.name}", queue_source(queue), queue.interval))
            for queue in target.queues
        ]
        named = [(name, queue, runner) for queue, runner in self._queues for name in queue.names]
        self._window = {name: queue.thresholds.window for name, queue, _ in named}
        # Per queue, the interval it is read at: a reading is stale after 3 of them.
        self._interval = {name: queue.interval or target.interval for name, queue, _ in named}
        self._runner_of = {name: runner for name, _, runner in named}
        self._thresholds = {name: queue.thresholds for name, queue, _ in named}
        self._cpu: dict[str, SourceRunner[WorkerSample]] = {}
        for group in target.workers:
            source = make_cpu_source(group)
            if source is not None:
                self._cpu[group.name] = runner(f"workers/{group.name}", source, group.interval)
        patterns = [pattern for group in target.workers for pattern in group.sessions]
        self._sessions: SourceRunner[tuple[Backend, ...]] | None = None
        if patterns:
            self._sessions = runner("sessions", SessionSampler(patterns), None)
        self._session_rules = {
            group.name: [glob_regex(p) for p in group.sessions] for group in target.workers
        }
        self._history: dict[str, deque[QueueSample]] = {
            name: deque(maxlen=MAX_HISTORY) for name in self._window
        }
        self._cpu_history: dict[str, deque[WorkerSample]] = {
            name: deque(maxlen=MAX_HISTORY) for name in self._cpu
        }
        # Per queue, the starts of its jobs seen so far (job_rescued_while_running).
        self._runs: dict[str, RunMemory] = {}
        # Per queue, its latest reading whole: its running jobs and task history.
        self._latest: dict[str, QueueSample] = {}
        # Per queue, its completions minute by minute and their normal (queue_capacity_lost).
        self._throughput = {
            name: QueueThroughput(t.capacity_learning, t.capacity_window)
            for name, t in self._thresholds.items()
        }
        # Per queue, since when work has waited with no consumer (queue_no_consumer).
        self._unserved: dict[str, datetime] = {}
        self._latest_sessions: tuple[Backend, ...] | None = None
        # The queues read at this poll's sample, and the (kind, subject) a
        # source down at it feeds.
        self._read: set[str] = set()
        self._undecided: frozenset[tuple[FindingKind, Subject]] = frozenset()
        self._queue_views: tuple[QueueView, ...] = ()
        self._worker_views: tuple[WorkerView, ...] = ()

    def _group_window(self, group: WorkerGroup) -> float:
        return max((self._window[q] for q in group.queues), default=0.0)

    def _runners(self) -> list[SourceRunner[Any]]:
        runners: list[SourceRunner[Any]] = [runner for _, runner in self._queues]
        runners.extend(self._cpu.values())
        if self._sessions is not None:
            runners.append(self._sessions)
        return runners

    def sample(self, context: PollContext) -> Sampled:
        """Every source's reading, into the bounded histories."""
        sampling = SampleContext(context.now, context.db)
        self._read, undecided = self._read_queues(sampling)
        for name, cpu_runner in self._cpu.items():
            reading = cpu_runner.poll(sampling)
            if reading is not None:
                self._cpu_history[name].append(reading)
        if self._sessions is not None:
            sessions = self._sessions.poll(sampling)
            if sessions is not None:
                self._latest_sessions = sessions
            elif not self._sessions.health.up:
                self._latest_sessions = None
        self._undecided = frozenset(undecided)
        return Sampled()

    def judge(self, context: PollContext) -> MonitorResult:
        """The queue detectors over the histories and the lock snapshot."""
        now = context.now
        self._prune(now)
        inputs = [
            QueueInput(
                name,
                self._thresholds[name],
                tuple(self._history[name]),
                tuple(self._worker_input(group) for group in self._bound(name)),
            )
            for name in self._window
        ]
        locks = LockContext(context.snapshot, self.target.locks, context.lock_findings)
        # Judged only on readings of this attempt's source: a frozen reading must
        # never make a finding (the source's target_down says why it is silent).
        judged = [queue for queue in inputs if self._runner_of[queue.name].health.up]
        verdicts = detect_queues(self.target.name, judged, locks, now)
        down = detect_source_down(self.target.name, [r.health for r in self._runners()], now)
        self._queue_views = tuple(self._queue_view(queue, now) for queue in inputs)
        self._worker_views = tuple(
            self._worker_view(group, now, locks) for group in self.target.workers
        )
        return MonitorResult(
            (*verdicts.findings, *self._job_findings(judged, self._read, now, locks), *down),
            self._undecided | verdicts.undecided,
        )

    def _read_queues(
        self, sampling: SampleContext
    ) -> tuple[set[str], set[tuple[FindingKind, Subject]]]:
        """Read the queues that are due: the names read, and what cannot be judged."""
        undecided: set[tuple[FindingKind, Subject]] = set()
        read: set[str] = set()
        for queue, runner in self._queues:
            readings = runner.poll(sampling)
            if readings is not None:
                read.update(readings)
                for name, sample in readings.items():
                    self._read_runs(name, sample)
                    self._latest[name] = sample
                    self._throughput[name].add(sample)
                    self._history[name].append(replace(sample, running=None, task_history=None))
            # Open findings stay as they were (nobody knows whether they cleared);
            # none is made from the last reading (see judge's judged).
            undecided |= undecided_while_down(
                runner.health, [Subject(queue=name) for name in queue.names], self.kinds
            )
        return read, undecided

    def _job_findings(
        self, inputs: list[QueueInput], read: set[str], now: datetime, locks: LockContext
    ) -> Iterable[Finding]:
        """The findings about consumers and jobs: stuck, unserved, too long, rescued."""
        target = self.target.name
        yield from detect_stuck_running(target, inputs, now)
        for queue in inputs:
            if finding := self._no_consumer(queue, queue.name in read, now):
                yield finding
        for queue in inputs:
            name = queue.name
            sample = self._latest.get(name)
            if sample is not None and (
                finding := detect_long_jobs(target, name, self._thresholds[name], sample, now)
            ):
                yield finding
            if finding := self._capacity(queue, now, locks):
                yield finding
            memory = self._runs.get(name)
            if memory is not None and (
                finding := detect_rescued_running(target, name, memory, now)
            ):
                yield finding

    def _capacity(self, queue: QueueInput, now: datetime, locks: LockContext) -> Finding | None:
        name, thresholds, throughput = queue.name, queue.thresholds, self._throughput[queue.name]
        normal = throughput.normal(thresholds.capacity_min_minutes, window_minutes(thresholds))
        if normal is None:
            return None
        longest = longest_running(self._latest.get(name), now)
        workers = tuple(worker_facts(w, now, thresholds, locks) for w in queue.workers)
        return detect_capacity_lost(
            self.target.name, name, thresholds, throughput.recent(), normal, longest, workers
        )

    def _no_consumer(self, queue: QueueInput, fresh: bool, now: datetime) -> Finding | None:
        """Fold a fresh reading into since when the queue is unserved, and judge it."""
        if fresh and queue.samples:
            latest = queue.samples[-1]
            since = unserved_since(
                self._unserved.get(queue.name), latest, consumer_counts(latest, queue.workers)
            )
            if since is None:
                self._unserved.pop(queue.name, None)
            else:
                self._unserved[queue.name] = since
        return detect_no_consumer(self.target.name, queue, self._unserved.get(queue.name), now)

    def _read_runs(self, name: str, sample: QueueSample) -> None:
        """Fold a reading's running jobs into the queue's memory of starts;
        the history keeps the counts only."""
        if sample.running is None:
            self._runs.pop(name, None)
        else:
            self._runs[name] = rescued_runs(sample.running, self._runs.get(name, RunMemory()))

    def _prune(self, now: datetime) -> None:
        for name, history in self._history.items():
            _drop_older(history, now, self._window[name])
        for group in self.target.workers:
            if group.name in self._cpu_history:
                _drop_older(self._cpu_history[group.name], now, self._group_window(group))

    def _bound(self, queue: str) -> Iterable[WorkerGroup]:
        return (group for group in self.target.workers if queue in group.queues)

    def _group_sessions(self, group: WorkerGroup) -> tuple[Backend, ...] | None:
        if not group.sessions or self._latest_sessions is None:
            return None
        rules = self._session_rules[group.name]
        return tuple(
            backend
            for backend in self._latest_sessions
            if any(rule.fullmatch(backend.application_name) for rule in rules)
        )

    def _worker_input(self, group: WorkerGroup) -> WorkerInput:
        return WorkerInput(
            group,
            tuple(self._cpu_history.get(group.name, ())),
            self._group_sessions(group),
        )

    def _stale(self, name: str, now: datetime) -> bool:
        """Whether the queue's source has not answered for 3 of its intervals (a
        late poll of lockwatch's own never makes a reading its source gave stale)."""
        latest = self._latest.get(name)
        if latest is not None and self._runner_of[name].health.up:
            return False
        return is_stale(None if latest is None else latest.at, now, self._interval[name])

    def _queue_view(self, queue: QueueInput, now: datetime) -> QueueView:
        source = next(f"queue/{q.name}" for q, _ in self._queues if queue.name in q.names)
        latest = self._latest.get(queue.name)
        observed = None if latest is None else latest.at
        if self._stale(queue.name, now):  # unknown: nothing frozen is shown
            workers = tuple(w.group.name for w in queue.workers)
            return QueueView(
                queue.name, source, queue.thresholds.window, workers=workers, observed_at=observed
            )
        fit = growth(in_window(queue.samples, now, queue.thresholds.window))
        return QueueView(
            name=queue.name,
            source=source,
            window=queue.thresholds.window,
            latest=queue.samples[-1] if queue.samples else None,
            growth_per_second=None if fit is None else fit.slope,
            workers=tuple(w.group.name for w in queue.workers),
            longest_job_seconds=longest_running(latest, now),
            normal_completed_per_minute=self._normal_rate(queue.name),
            observed_at=observed,
        )

    def _normal_rate(self, name: str) -> float | None:
        thresholds = self._thresholds[name]
        normal = self._throughput[name].normal(
            thresholds.capacity_min_minutes, window_minutes(thresholds)
        )
        return None if normal is None else normal.completed_per_minute

    def _worker_view(self, group: WorkerGroup, now: datetime, locks: LockContext) -> WorkerView:
        window = self._group_window(group)
        cpu = in_window(self._cpu_history.get(group.name, ()), now, window)
        sessions = self._group_sessions(group)
        return WorkerView(
            name=group.name,
            queues=group.queues,
            window=window,
            latest=cpu[-1] if cpu else None,
            cpu_cores=cpu_cores(cpu) if covered(cpu, window) else None,
            sessions=None if sessions is None else session_counts(sessions),
            waiting_on=waiting_on(sessions or (), locks.snapshot, locks.settings),
        )

    def publish(self, view: TargetView) -> TargetView:
        return replace(
            view,
            queues=self._queue_views,
            workers=self._worker_views,
            sources=(*view.sources, *(runner.health for runner in self._runners())),
        )

    # The learned normals (queue_capacity_lost) outlive a restart and a reload;
    # a crash loses at most SAVE_EVERY of learning.
    def save(self, now: datetime) -> StateDocument:
        return {THROUGHPUT: {name: t.dump() for name, t in self._throughput.items()}}

    def restore(self, document: StateDocument) -> None:
        saved = document.get(THROUGHPUT)
        if isinstance(saved, dict):
            for name, throughput in self._throughput.items():
                throughput.load(saved.get(name))

    def save_due(self, now: datetime, saved_at: datetime | None) -> bool:
        return saved_at is None or now - saved_at >= SAVE_EVERY

    def take_over(self, old: Monitor) -> None:
        if isinstance(old, QueueMonitor):
            for name, throughput in old._throughput.items():
                if name in self._throughput and throughput.same_periods(self._throughput[name]):
                    self._throughput[name] = throughput

    def close(self) -> None:
        for runner in self._runners():
            try:
                runner.close()
            except Exception:
                log.exception("%s: closing %s failed", self.target.name, runner.name)


def _drop_older(history: deque[S], now: datetime, window: float) -> None:
    while history and (now - history[0].at).total_seconds() > window:
        history.popleft()

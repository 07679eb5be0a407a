"""When each target polls, and on which thread: one plan of next-poll times on
the monotonic clock, one dispatcher thread that sleeps until the earliest, and
a bounded pool of poller threads that run what is due.

A poll mostly waits on its server, so a few pollers keep up with hundreds of
targets; the pool grows (up to ``max_pollers``) only while every poller is
busy and something else is due, which is when polls hang (a server that stops
answering holds one poller until the watchdog breaks its connection). A job
is never run twice at once: it is back in the plan only after its poll ends.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from lockwatch.state.lateness import Lateness

log = logging.getLogger(__name__)

# Enough for a few dozen hung polls at once before on-time targets queue behind them.
MAX_POLLERS = 64


class Scheduled(Protocol):
    """What the scheduler runs: one due poll, and when the next is due."""

    def run_due(self, due: float) -> float | None:
        """Run the poll due at ``due``; the next due time, or None when done."""
        ...


Job = TypeVar("Job")


class Plan(Generic[Job]):
    """Jobs by due time: the earliest first, and among equal times the one
    planned first, so no job due is passed over by one due later. Jobs are
    told apart by identity; planning a job again replaces its due time."""

    def __init__(self) -> None:
        # due, order, id(job); an entry whose job was planned again since is stale.
        self._heap: list[tuple[float, int, int]] = []
        self._live: dict[int, tuple[float, int, Job]] = {}
        self._order = itertools.count()

    def __contains__(self, job: Job) -> bool:
        return id(job) in self._live

    def put(self, job: Job, due: float) -> None:
        order = next(self._order)
        self._live[id(job)] = (due, order, job)
        heapq.heappush(self._heap, (due, order, id(job)))

    def next_due(self) -> float | None:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: float) -> list[tuple[Job, float]]:
        """Every job due by ``now`` with its due time, earliest first."""
        due: list[tuple[Job, float]] = []
        while (first := self.next_due()) is not None and first <= now:
            _, _, key = heapq.heappop(self._heap)
            at, _, job = self._live.pop(key)
            due.append((job, at))
        return due

    def _drop_stale(self) -> None:
        while self._heap:
            _, order, key = self._heap[0]
            live = self._live.get(key)
            if live is not None and live[1] == order:
                return
            heapq.heappop(self._heap)


class PollScheduler:
    """Runs scheduled jobs on a bounded, growing pool of poller threads."""

    def __init__(
        self,
        *,
        max_pollers: int = MAX_POLLERS,
        clock: Callable[[], float] = time.monotonic,
        lateness: Lateness | None = None,
        name: str = "poller",
    ) -> None:
        self.clock = clock
        self.lateness = Lateness() if lateness is None else lateness
        self._max_pollers = max_pollers
        self._name = name
        self._lock = threading.Lock()
        self._planned = threading.Condition(self._lock)  # the dispatcher waits on it
        self._work = threading.Condition(self._lock)  # idle pollers wait on it
        self._plan: Plan[Scheduled] = Plan()
        self._ready: deque[tuple[Scheduled, float]] = deque()
        self._running: set[int] = set()  # id() of jobs a poller runs now
        self._hurried: set[int] = set()  # ... that are due again as soon as they end
        self._pollers: list[threading.Thread] = []
        self._idle = 0
        self._dispatcher: threading.Thread | None = None
        self._closed = False

    @property
    def pollers(self) -> int:
        """Poller threads started so far."""
        with self._lock:
            return len(self._pollers)

    def add(self, job: Scheduled, due: float) -> None:
        """Plan ``job`` to run first at ``due`` (on ``clock``)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the poll scheduler is closed")
            self._plan.put(job, due)
            if self._dispatcher is None:
                self._dispatcher = threading.Thread(
                    target=self._dispatch, name=f"{self._name}-plan", daemon=True
                )
                self._dispatcher.start()
            self._planned.notify()

    def hurry(self, job: Scheduled) -> None:
        """Make ``job`` due now (or as soon as its poll in flight ends): a stop
        to carry out does not wait for its next poll."""
        with self._lock:
            if id(job) in self._running:
                self._hurried.add(id(job))
            elif job in self._plan:
                self._plan.put(job, self.clock())
                self._planned.notify()

    def close(self) -> None:
        """Run nothing more; pollers end once their poll in flight does."""
        with self._lock:
            self._closed = True
            self._planned.notify_all()
            self._work.notify_all()

    def _dispatch(self) -> None:
        with self._lock:
            while not self._closed:
                now = self.clock()
                due = self._plan.pop_due(now)
                if due:
                    self._ready.extend(due)
                    self._work.notify(len(due))
                    self._grow()
                following = self._plan.next_due()
                self._planned.wait(None if following is None else max(0.0, following - now))

    def _grow(self) -> None:
        """Start pollers for ready jobs that no idle poller will take (lock held)."""
        missing = len(self._ready) - self._idle
        while missing > 0 and len(self._pollers) < self._max_pollers:
            poller = threading.Thread(
                target=self._poll, name=f"{self._name}-{len(self._pollers) + 1}", daemon=True
            )
            self._pollers.append(poller)
            poller.start()
            missing -= 1

    def _poll(self) -> None:
        while (taken := self._take()) is not None:
            job, due = taken
            self.lateness.observe(self.clock() - due)
            try:
                following = job.run_due(due)
            except Exception:  # a job's own errors are its to log; this one drops it
                log.exception("a scheduled poll failed; it is not planned again")
                following = None
            self._done(job, following)

    def _take(self) -> tuple[Scheduled, float] | None:
        with self._lock:
            while not self._ready and not self._closed:
                self._idle += 1
                self._work.wait()
                self._idle -= 1
            if self._closed:
                return None
            job, due = self._ready.popleft()
            self._running.add(id(job))
            return job, due

    def _done(self, job: Scheduled, following: float | None) -> None:
        with self._lock:
            self._running.discard(id(job))
            hurried = id(job) in self._hurried
            self._hurried.discard(id(job))
            if following is None or self._closed:
                return
            self._plan.put(job, self.clock() if hurried else following)
            self._planned.notify()


class Seat:
    """One job's place on a scheduler: the daemon's, or one of its own; the
    scheduler's clock; hurried when the job must stop; its end awaited."""

    def __init__(self, job: Scheduled, name: str) -> None:
        self._job = job
        self._name = name
        self._scheduler: PollScheduler | None = None
        self._own = False  # a scheduler of its own, closed with the job
        self.clock: Callable[[], float] = time.monotonic
        self._ended = threading.Event()

    def start(self, scheduler: PollScheduler | None, delay: float) -> None:
        """The job's first run ``delay`` seconds from now, on ``scheduler``'s
        pollers; without one, on a poller of its own."""
        self._own = scheduler is None
        self._scheduler = scheduler or PollScheduler(max_pollers=1, name=f"poll-{self._name}")
        self.clock = self._scheduler.clock
        self._scheduler.add(self._job, self.clock() + delay)

    @property
    def started(self) -> bool:
        return self._scheduler is not None

    def hurry(self) -> None:
        """The job's next run now, or as soon as its run in flight ends."""
        if self._scheduler is not None:
            self._scheduler.hurry(self._job)

    def ended(self) -> None:
        """The job ran for the last time: waiters go on; a scheduler of its own closes."""
        self._ended.set()
        if self._own and self._scheduler is not None:
            self._scheduler.close()

    def wait(self, timeout: float) -> None:
        """Until the job has ended, at most ``timeout`` seconds."""
        self._ended.wait(timeout)

    @property
    def finished(self) -> bool:
        """Ended, or never started."""
        return self._scheduler is None or self._ended.is_set()

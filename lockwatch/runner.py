"""One target's loop: its monitors on their deadline, the ledger, the state dir and the board."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from psycopg import sql

from lockwatch.detect.locks import detect_locks
from lockwatch.detect.sources import detect_source_down
from lockwatch.detect.targets import detect_target_down
from lockwatch.model.findings import Finding, FindingKind, Subject
from lockwatch.model.locks import LockSnapshot
from lockwatch.model.pooler import PoolerSnapshot
from lockwatch.model.views import TargetStatus, TargetView
from lockwatch.monitors.base import Monitor, PollContext
from lockwatch.monitors.jobs import JobMonitor
from lockwatch.monitors.queues import QueueMonitor
from lockwatch.sample.base import SampleContext, SourceRunner
from lockwatch.sample.locks import PgLockSampler, SampleError
from lockwatch.sample.pooler import PgBouncerSampler
from lockwatch.settings.jobs import JobSpec
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.holds import HoldTracker
from lockwatch.state.jobstore import JobStore
from lockwatch.state.ledger import FindingLedger, Transitions
from lockwatch.state.statefile import StateStore

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]


TransitionListener = Callable[[Transitions], None]


LOCK_KINDS = frozenset(
    {
        FindingKind.LOCK_HELD_TOO_LONG,
        FindingKind.LOCK_CONVOY,
        FindingKind.LOCK_ORPHANED,
        FindingKind.LOCK_POOLED_SESSION,
        FindingKind.LOCK_UNEXPECTED_HOLDER,
        FindingKind.LEADER_LOCK_MISSING,
    }
)


# A live server cancels a slow statement itself at statement_timeout, so
# nothing of lockwatch's keeps running there; no answer this long after that
# means the server, or the path to it, has gone silent.
WATCHDOG_MARGIN = 1.0


STOP_GRACE = 2.0  # seconds a poll in flight may take to finish at shutdown


def utc_now() -> datetime:
    return datetime.now(UTC)


def build_monitors(
    target: Target, jobs: Sequence[JobSpec] = (), job_store: JobStore | None = None
) -> tuple[Monitor, ...]:
    """Everything a target samples besides its advisory locks."""
    monitors: list[Monitor] = []
    if target.queues or target.workers:
        monitors.append(QueueMonitor(target))
    own_jobs = [job for job in jobs if job.target == target.name]
    if own_jobs:
        monitors.append(JobMonitor(target, own_jobs, job_store, started_at=utc_now()))
    return tuple(monitors)


@dataclass(frozen=True, slots=True)
class _RunnerDatabase:
    runner: TargetRunner

    def query(
        self, query: str | sql.SQL | sql.Composed, params: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        return self.runner._query(query, params)


@dataclass
class TargetRunner:
    """Polls one target on its schedule and publishes what it finds."""

    target: Target
    board: Board
    store: StateStore
    clock: Clock = utc_now
    listeners: tuple[TransitionListener, ...] = ()
    stop_event: threading.Event = field(default_factory=threading.Event)
    jobs: tuple[JobSpec, ...] = ()  # every configured job; the runner follows its own
    job_store: JobStore | None = None

    def __post_init__(self) -> None:
        self.sampler = PgLockSampler(
            self.target.dsn,
            connect_timeout=self.target.connect_timeout,
            statement_timeout=self.target.statement_timeout,
        )
        self.monitors = build_monitors(self.target, self.jobs, self.job_store)
        self.pooler: SourceRunner[PoolerSnapshot] | None = None
        if self.target.pgbouncer is not None:
            self.pooler = SourceRunner(
                self.target.name,
                "pgbouncer",
                PgBouncerSampler(
                    self.target.pgbouncer.dsn, connect_timeout=self.target.connect_timeout
                ),
                None,
                self.target.interval,
            )
        self._db = _RunnerDatabase(self)
        self.tracker = HoldTracker(continuity_gap=max(3 * self.target.interval, 30.0))
        self.ledger = FindingLedger(self.target.name)
        self.poll_started: float | None = None  # monotonic, while a poll's queries run
        # Monotonic time the scheduled poll running now (or last) was due; how
        # late polls start is read from it (bench/scale.py).
        self.poll_due: float | None = None
        # Timed from the first query, the connection being made: a silent
        # server fails the poll within interval + statement_timeout + margin
        # of going silent, two intervals while statement_timeout + margin is
        # under the interval (the defaults: 5 s + 1 s of 10 s).
        self.poll_timeout = self.target.statement_timeout + WATCHDOG_MARGIN
        self._failing_since: datetime | None = None
        self._view = TargetView(self.target)
        self._thread: threading.Thread | None = None
        self._aborted = False
        self._saved_at: datetime | None = None
        self._restore()
        self.board.register(self.target)

    def _restore(self) -> None:
        document = self.store.load(self.target.name)
        if document is None:
            return
        self.tracker.load(document.get("holds") or {})
        self.ledger.load(document.get("findings") or [])
        self._view = TargetView(self.target, findings=self.ledger.active)
        log.info(
            "%s: restored %d hold times and %d active findings from the state dir",
            self.target.name,
            len(self.tracker),
            len(self.ledger.active),
        )

    # -- one poll -----------------------------------------------------------

    def poll_once(self) -> TargetView:
        self._aborted = False
        try:
            status = self._sample()
        finally:
            self.poll_started = None
        if status.snapshot is None and self.stop_event.is_set():
            # A poll broken by shutdown says nothing about the target.
            return self._view
        now = status.checked_at
        keep: frozenset[FindingKind] = frozenset()
        pooler_found: list[Finding] = []
        pooler_undecided: set[tuple[FindingKind, Subject]] = set()
        if status.snapshot is not None:
            pooled, pooler_found, pooler_undecided = self._sample_pooler(now)
            current = detect_locks(status.snapshot, self.target.locks, now, pooled)
        else:
            current = detect_target_down(status, now)
            keep = LOCK_KINDS
        found, undecided = self._poll_monitors(
            PollContext(now, self._db if status.up else None, status.snapshot, tuple(current))
        )
        found.extend(pooler_found)
        undecided |= pooler_undecided
        transitions = self.ledger.update([*current, *found], keep=keep, hold=undecided)
        view = TargetView(
            target=self.target,
            status=status,
            polls_total=self._view.polls_total + 1,
            poll_errors_total=self._view.poll_errors_total + (0 if status.up else 1),
            state_write_errors_total=self._view.state_write_errors_total,
            last_success=now if status.up else self._view.last_success,
            findings=transitions.active,
        )
        for monitor in self.monitors:
            view = monitor.publish(view)
        if self.pooler is not None:
            view = replace(view, sources=(*view.sources, self.pooler.health))
        if not self._persist(now, changed=bool(transitions.fired or transitions.resolved)):
            view = replace(view, state_write_errors_total=view.state_write_errors_total + 1)
        self._view = view
        self.board.publish(view)
        for listener in self.listeners:
            listener(transitions)
        return view

    def _sample_pooler(
        self, now: datetime
    ) -> tuple[PoolerSnapshot | None, list[Finding], set[tuple[FindingKind, Subject]]]:
        """pgbouncer's view of this server (None without one, or when it cannot
        be read), the finding for the pooler as a source, and the pooled-session
        findings that, unread, neither fire nor resolve."""
        if self.pooler is None:
            return None, [], set()
        pooled = self.pooler.poll(SampleContext(now, None))
        undecided: set[tuple[FindingKind, Subject]] = set()
        if pooled is None:
            undecided = {
                (f.kind, f.subject)
                for f in self.ledger.active
                if f.kind is FindingKind.LOCK_POOLED_SESSION
            }
        return pooled, detect_source_down(self.target.name, [self.pooler.health], now), undecided

    def _poll_monitors(
        self, context: PollContext
    ) -> tuple[list[Finding], set[tuple[FindingKind, Subject]]]:
        """What the target's other sources show; a monitor that breaks is
        logged and its findings held, and never costs the locks their poll."""
        found: list[Finding] = []
        undecided: set[tuple[FindingKind, Subject]] = set()
        for monitor in self.monitors:
            try:
                result = monitor.poll(context)
            except Exception:
                log.exception(
                    "%s: %s failed; its findings stay as they were",
                    self.target.name,
                    type(monitor).__name__,
                )
                undecided |= {
                    (f.kind, f.subject) for f in self.ledger.active if f.kind not in LOCK_KINDS
                }
                continue
            found.extend(result.findings)
            undecided |= result.undecided
        return found, undecided

    def _query(
        self, query: str | sql.SQL | sql.Composed, params: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """A source's query on the poll's session, under the same watchdog as the poll."""
        self.poll_started = time.monotonic()
        try:
            return self.sampler.query(query, params)
        finally:
            self.poll_started = None

    def _sample(self) -> TargetStatus:
        try:
            self.sampler.connect()
            self.poll_started = time.monotonic()
            raw = self.sampler.sample()
        except SampleError as exc:
            now = self.clock()
            message = str(exc)
            if self._aborted:
                message = f"poll did not answer within {self.poll_timeout:g}s ({message})"
            if self._failing_since is None:
                self._failing_since = now
                log.error("%s: cannot sample: %s", self.target.name, message)
            return TargetStatus(self.target.name, now, None, message, self._failing_since)
        now = self.clock()
        if self._failing_since is not None:
            log.info("%s: sampling again after a failure", self.target.name)
            self._failing_since = None
        locks = self.tracker.observe(raw.locks, raw.backends, now)
        snapshot = LockSnapshot(
            target=self.target.name,
            taken_at=now,
            server_version=raw.server_version,
            locks=locks,
            backends=raw.backends,
            poll_seconds=raw.seconds,
        )
        return TargetStatus(self.target.name, now, snapshot)

    def _persist(self, now: datetime, *, changed: bool) -> bool:
        """Save when something changed or the last save grows old; False if a save failed."""
        if self.store.directory is None:
            return True
        if not (changed or self.tracker.changed_since_dump() or self._save_due(now)):
            return True
        saved = self.store.save(
            self.target.name,
            {"holds": self.tracker.dump(now), "findings": self.ledger.dump()},
        )
        if saved:
            self._saved_at = now
        return saved

    def _save_due(self, now: datetime) -> bool:
        # Restored hold times stay trusted for the continuity gap after the
        # last save, so the file is refreshed well within it.
        last = self._saved_at
        return last is None or (now - last).total_seconds() >= self.tracker.continuity_gap / 3

    # -- schedule -----------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._loop, name=f"poll-{self.target.name}", daemon=True
        )
        self._thread.start()

    def _loop(self) -> None:
        interval = self.target.interval
        next_due = time.monotonic()
        while not self.stop_event.is_set():
            self.poll_due = next_due
            try:
                self.poll_once()
            except Exception:
                log.exception("%s: poll failed unexpectedly; polling goes on", self.target.name)
            next_due += interval
            late = time.monotonic() - next_due
            if late > 0:
                skipped = int(late // interval) + 1
                log.warning(
                    "%s: poll overran its %gs interval by %.1fs; skipping %d slot(s)",
                    self.target.name,
                    interval,
                    late,
                    skipped,
                )
                next_due += skipped * interval
            self.stop_event.wait(max(0.0, next_due - time.monotonic()))
        # Whatever changed since the last save is kept for the next start.
        self._persist(self.clock(), changed=True)
        self.sampler.close()
        for monitor in self.monitors:
            monitor.close()
        if self.pooler is not None:
            self.pooler.close()

    def check_watchdog(self, now: float) -> None:
        started = self.poll_started
        if started is not None and not self._aborted and now - started > self.poll_timeout:
            self._aborted = True
            log.warning(
                "%s: poll hung for more than %gs; breaking its connection",
                self.target.name,
                self.poll_timeout,
            )
            self.sampler.abort()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def stop(self) -> None:
        """Stop polling and wait for the thread; a poll still hanging past the
        grace period has its connection broken."""
        self.stop_event.set()
        self.join(STOP_GRACE)
        self.sampler.abort()
        self.join(STOP_GRACE)

    def take_over(self, old: TargetRunner) -> None:
        """Carry on from the (stopped) runner this one replaces after a config
        change: hold times, active findings and counters survive the change."""
        old.tracker.continuity_gap = self.tracker.continuity_gap
        self.tracker = old.tracker
        self.ledger = old.ledger
        self._view = replace(old._view, target=self.target)
        self._failing_since = old._failing_since
        self._saved_at = old._saved_at
        self.board.register(self.target)

    def active_findings(self) -> tuple[Finding, ...]:
        return self.ledger.active

"""The loop: sample -> snapshot -> detect -> publish, one thread per target.

Each target runs on its own deadline schedule, so a server that stops
answering delays nobody else; a watchdog breaks polls that hang past their
timeout. Any unexpected exception in a poll is logged with its traceback and
the loop goes on.

Signals only set flags for the main loop: SIGTERM/SIGINT stop (each target
saves its state), SIGHUP reloads the config file. Under systemd the main loop
reports readiness and pings the watchdog, but only while polls make progress.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from http import HTTPStatus
from types import FrameType
from typing import Any

from psycopg import sql

from lockwatch.board import Board, TargetView
from lockwatch.config import ConfigError
from lockwatch.detect.locks import detect_locks
from lockwatch.detect.targets import detect_target_down
from lockwatch.holds import HoldTracker
from lockwatch.job_monitor import JobMonitor
from lockwatch.jobstore import JobStore, PostgresJobStore, SqliteJobStore
from lockwatch.ledger import FindingLedger, Transitions
from lockwatch.model import (
    Finding,
    FindingKind,
    LockSnapshot,
    PoolerSnapshot,
    Subject,
    TargetStatus,
)
from lockwatch.notify.service import AlertNotifier
from lockwatch.publish.http import HttpServer
from lockwatch.publish.metrics import build_registry
from lockwatch.publish.pings import PingReceiver
from lockwatch.queue_monitor import QueueMonitor
from lockwatch.sample.pg_locks import PgLockSampler, SampleError
from lockwatch.sample.pgbouncer import PgBouncerSampler
from lockwatch.sdnotify import Notifier
from lockwatch.settings import JobSpec, Settings, Target
from lockwatch.sources import Monitor, PollContext, SampleContext, SourceRunner, detect_source_down
from lockwatch.statefile import StateStore

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
TransitionListener = Callable[[Transitions], None]
SettingsLoader = Callable[[], Settings]  # reads the config again; raises ConfigError
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
WATCHDOG_TICK = 0.2
# A live server cancels a slow statement itself at statement_timeout, so
# nothing of lockwatch's keeps running there; no answer this long after that
# means the server, or the path to it, has gone silent.
WATCHDOG_MARGIN = 1.0
STOP_GRACE = 2.0  # seconds a poll in flight may take to finish at shutdown


def utc_now() -> datetime:
    return datetime.now(UTC)


def log_transitions(transitions: Transitions) -> None:
    for finding in transitions.fired:
        log.warning(
            "firing %s [%s] %s/%s: %s",
            finding.kind.value,
            finding.severity.value,
            finding.target,
            finding.subject.render(),
            finding.summary,
        )
    for finding in transitions.resolved:
        log.info(
            "resolved %s %s/%s: %s",
            finding.kind.value,
            finding.target,
            finding.subject.render(),
            finding.summary,
        )


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


def pinged_jobs(settings: Settings) -> set[str]:
    """Jobs whose runs come from pings: those without a query of their own."""
    return {job.name for job in settings.jobs if job.query is None}


def open_job_store(settings: Settings) -> JobStore | None:
    """Where pinged runs are kept; None when no job is pinged. Opened lazily:
    a store that fails costs pings and pinged jobs, never the daemon."""
    if not pinged_jobs(settings):
        return None
    if settings.pings.store_dsn is not None:
        return PostgresJobStore(settings.pings.store_dsn, settings.pings.table)
    assert settings.state_dir is not None  # the config loader insists on one
    return SqliteJobStore(settings.state_dir / "jobs.sqlite3")


class Daemon:
    """Runs every target, the HTTP server and the watchdog until stopped."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Clock = utc_now,
        listeners: tuple[TransitionListener, ...] = (log_transitions,),
        reload: SettingsLoader | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self.settings = settings
        self.board = Board()
        self.store = StateStore(settings.state_dir)
        self.stop_event = threading.Event()
        self._clock = clock
        self._listeners = listeners
        # Notifications, delivered from threads of their own: the poll threads
        # only hand each poll's findings over.
        self.alerts: AlertNotifier | None = None
        if settings.notify.channels:
            self.alerts = AlertNotifier(
                settings.notify,
                settings.state_dir,
                targets=[target.name for target in settings.targets],
                external_url=f"{settings.web.scheme if settings.web else 'http'}://{settings.listen}/",
                clock=clock,
            )
            self._listeners = (*listeners, self.alerts)
        self._reload = reload
        self._reload_requested = threading.Event()
        self.notifier = Notifier() if notifier is None else notifier
        self._last_ping: float | None = None
        self._ping_withheld = False
        self.job_store = open_job_store(settings)
        self.runners = [self._runner(target) for target in settings.targets]
        self.registry = build_registry(self.board)
        if self.alerts is not None:
            self.registry.register(self.alerts.collector())
        self.http = HttpServer(
            self.board,
            self.registry,
            settings.listen,
            self._stale_after(self.runners),
            web=settings.web,
        )
        if self.job_store is not None:
            self.http.pings = PingReceiver(
                jobs=pinged_jobs(settings), token=settings.pings.token, store=self.job_store
            )

    def _runner(self, target: Target) -> TargetRunner:
        return TargetRunner(
            target,
            self.board,
            self.store,
            self._clock,
            self._listeners,
            jobs=self.settings.jobs,
            job_store=self.job_store,
        )

    @staticmethod
    def _stale_after(runners: list[TargetRunner]) -> float:
        """Seconds without a finished poll after which the loop counts as stalled."""
        return max(3 * max(r.target.interval for r in runners), 10.0) + max(
            r.target.connect_timeout + r.poll_timeout for r in runners
        )

    def _status_line(self) -> str:
        return f"watching {len(self.runners)} target(s)"

    def start(self) -> None:
        self.http.start()
        host, port = self.http.address
        log.info(
            "lockwatch listening on http://%s:%d/ watching %d target(s)",
            f"[{host}]" if ":" in host else host,
            port,
            len(self.runners),
        )
        if self.alerts is not None:
            self.alerts.start()
        for runner in self.runners:
            runner.start()
        self.notifier.ready(self._status_line())

    def run_forever(self) -> None:
        """Block until SIGTERM/SIGINT (or ``stop()``), reloading on SIGHUP;
        handlers only set flags."""

        def request_stop(signum: int, frame: FrameType | None) -> None:
            self.stop_event.set()

        def request_reload(signum: int, frame: FrameType | None) -> None:
            self._reload_requested.set()

        handlers = {signal.SIGTERM: request_stop, signal.SIGINT: request_stop}
        handlers[signal.SIGHUP] = request_reload
        previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
        try:
            self.start()
            self.watch()
        finally:
            self.stop()
            for sig, old in previous.items():
                signal.signal(sig, old)

    def watch(self) -> None:
        while not self.stop_event.wait(WATCHDOG_TICK):
            now = time.monotonic()
            for runner in self.runners:
                runner.check_watchdog(now)
            if self._reload_requested.is_set():
                self._reload_requested.clear()
                self.reload()
            self.keep_alive(time.monotonic())

    def keep_alive(self, now: float) -> None:
        """Ping systemd's watchdog, but only while polls make progress: a wedged
        loop then gets the service restarted. /healthz applies the same rule."""
        interval = self.notifier.watchdog_interval
        if interval is None or (self._last_ping is not None and now - self._last_ping < interval):
            return
        status, reason = self.http.health()
        if status is not HTTPStatus.OK:
            if not self._ping_withheld:
                log.error("not pinging the systemd watchdog: %s", reason)
                self._ping_withheld = True
            return
        if self._ping_withheld:
            log.info("polls progress again; pinging the systemd watchdog")
            self._ping_withheld = False
        self.notifier.watchdog()
        self._last_ping = now

    def reload(self) -> bool:
        """Read the config again and apply it; a config with problems is
        rejected whole (each problem logged) and the running one stays."""
        if self._reload is None:
            log.warning("reload requested, but lockwatch runs without a config file: nothing to do")
            return False
        self.notifier.reloading()
        try:
            try:
                settings = self._reload()
            except ConfigError as exc:
                for problem in exc.problems:
                    log.error("config reload: %s", problem)
                log.error(
                    "config reload rejected (%d problem(s)); still running the previous config",
                    len(exc.problems),
                )
                return False
            self._apply(settings)
            return True
        finally:
            self.notifier.ready(self._status_line())

    def _apply(self, settings: Settings) -> None:
        """Swap targets: unchanged ones keep their runner, changed ones get a new
        runner that takes over the old one's state, removed ones stop."""
        old = {runner.target.name: runner for runner in self.runners}
        runners: list[TargetRunner] = []
        counts = {"kept": 0, "changed": 0, "added": 0, "removed": 0}
        jobs_changed = settings.jobs != self.settings.jobs
        self.settings = replace(self.settings, jobs=settings.jobs)
        if self.http.pings is not None:
            self.http.pings.jobs = pinged_jobs(settings)
        for target in settings.targets:
            previous = old.pop(target.name, None)
            if previous is not None and previous.target == target and not jobs_changed:
                runners.append(previous)
                counts["kept"] += 1
                continue
            if previous is not None:
                previous.stop()
            runner = self._runner(target)
            if previous is not None:
                runner.take_over(previous)
            counts["changed" if previous is not None else "added"] += 1
            runners.append(runner)
            runner.start()
        for name, removed in old.items():
            removed.stop()
            self.board.forget(name)
            counts["removed"] += 1
        self.runners = runners
        self.http.stale_after = self._stale_after(runners)
        for setting in ("listen", "state_dir", "notify", "pings", "web"):
            if getattr(settings, setting) != getattr(self.settings, setting):
                log.warning("config reload: a new %s takes effect at the next restart", setting)
        self.settings = replace(
            settings,
            listen=self.settings.listen,
            state_dir=self.settings.state_dir,
            notify=self.settings.notify,
            pings=self.settings.pings,
            web=self.settings.web,
        )
        log.info(
            "config reloaded: %(kept)d target(s) unchanged, %(changed)d changed, "
            "%(added)d added, %(removed)d removed",
            counts,
        )

    def stop(self) -> None:
        self.notifier.stopping()
        self.stop_event.set()
        for runner in self.runners:
            runner.stop_event.set()
        deadline = time.monotonic() + STOP_GRACE
        for runner in self.runners:
            runner.join(timeout=max(0.0, deadline - time.monotonic()))
        for runner in self.runners:
            runner.sampler.abort()
            runner.join(timeout=STOP_GRACE)
        if self.alerts is not None:
            self.alerts.stop(STOP_GRACE)
        self.http.stop()
        if self.job_store is not None:
            self.job_store.close()
        self.notifier.close()
        log.info("lockwatch stopped")

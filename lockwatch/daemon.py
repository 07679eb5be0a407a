"""The daemon's lifecycle: one runner per target, the HTTP server, the notifier
and the watchdog, from start to stop.

Each target polls on its own deadline (``runner.py``), on one of a bounded
pool of poller threads (``scheduler.py``), so a server that stops answering
holds one poller and delays nobody else; the watchdog here breaks network
steps that hang past their limit. Signals only set flags for the main loop:
SIGTERM/SIGINT stop (each target saves its state), SIGHUP reloads the config
file, applying the difference target by target. Under systemd the main loop
reports readiness and pings the watchdog, but only while polls make progress.
"""

from __future__ import annotations

import gc
import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from http import HTTPStatus
from types import FrameType
from typing import TYPE_CHECKING

from lockwatch.config.reader import ConfigError
from lockwatch.daemon_fleet import FleetFollower
from lockwatch.model.incident_text import log_event
from lockwatch.model.incidents import IncidentChanges
from lockwatch.publish.http import HttpServer
from lockwatch.publish.metrics.fleet import FleetCollector
from lockwatch.publish.metrics.history_store import HistoryStoreCollector
from lockwatch.publish.metrics.incidents import WebLinks
from lockwatch.publish.metrics.lateness import LatenessCollector
from lockwatch.publish.metrics.registry import Metrics
from lockwatch.publish.pings import PingReceiver
from lockwatch.runner import (
    STOP_GRACE,
    IncidentListener,
    TargetRunner,
    start_spread,
)
from lockwatch.scheduler import PollScheduler
from lockwatch.settings.sharding import Shard
from lockwatch.settings.targets import Settings, Target
from lockwatch.state.board import Board
from lockwatch.state.deliveries import Deliveries
from lockwatch.state.incident_history import MEMORY_ONLY, open_history
from lockwatch.state.jobstore import JobStore, PostgresJobStore, SqliteJobStore
from lockwatch.state.pace import BACKOFF_CAP
from lockwatch.state.servers import ServerMap
from lockwatch.state.statefile import StateDirLock, StateStore, remove_leftovers
from lockwatch.stopping import stop_together
from lockwatch.util.clock import Clock, utc_now
from lockwatch.util.memory import collect_less_often
from lockwatch.util.sdnotify import Notifier
from lockwatch.util.signals import Requests

if TYPE_CHECKING:
    from lockwatch.notify.service import AlertNotifier

log = logging.getLogger(__name__)

SettingsLoader = Callable[[], Settings]  # reads the config again; raises ConfigError
# Seconds between the main loop's rounds at most (reloads, the fleet, systemd's
# watchdog): each wakes the process, on the host it may share with the
# database. A poll step that may hang is looked at when its limit passes.
WATCHDOG_TICK = 1.0
# What the main loop is asked to do (Daemon.request_stop, request_reload).
STOP, RELOAD = "stop", "reload"
# How long after a step's limit the loop looks: overdue is past the limit.
PAST_LIMIT = 0.01
# Settings a reload cannot change: said in the log, applied at the next restart.
RESTART_ONLY = ("listen", "state_dir", "pings", "web", "shard", "replica")


def log_incidents(told: IncidentChanges) -> None:
    """One line per incident opened, worse or resolved (the runner logs its
    findings)."""
    for moment, incidents, level in (
        ("opened", told.opened, logging.WARNING),
        ("worse", told.worsened, logging.WARNING),
        ("resolved", told.resolved, logging.INFO),
    ):
        for incident in incidents:
            again = moment == "opened" and incident.reopened  # its root back: flapping
            line, fields = log_event(incident, "reopened" if again else moment)
            log.log(level, "%s", line, extra={"fields": fields})


def settle_garbage_collector() -> None:
    """Move what startup made (modules, settings, the HTTP server: some
    70,000 objects) out of the cyclic collector's sight before the first poll.
    They live as long as the process, and each full collection would walk
    them again for nothing: 19-38 ms a time on the benchmark's machine,
    0.001 ms after ``gc.freeze()`` (docs/benchmarks.md). Then collect less
    often (``GC_THRESHOLDS``)."""
    gc.collect()
    gc.freeze()
    collect_less_often()


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


class Daemon(FleetFollower):
    """Runs every target, the HTTP server and the watchdog until stopped."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Clock = utc_now,
        listeners: tuple[IncidentListener, ...] = (log_incidents,),
        reload: SettingsLoader | None = None,
        notifier: Notifier | None = None,
        also_listen: tuple[str, ...] = (),  # more addresses than settings.listen
        telemetry_path: str = "/metrics",
        shard: Shard | None = None,  # --shard; else the config's shard:
    ) -> None:
        self.settings = settings = self._discover(settings, shard, clock)
        # First: nothing is read from a state dir another lockwatch uses.
        self.state_lock = None if settings.state_dir is None else StateDirLock(settings.state_dir)
        remove_leftovers(settings.state_dir)
        self.board = Board()
        self.store = StateStore(settings.state_dir)
        self.stop_event = threading.Event()
        self._clock = clock
        self._listeners = self._base_listeners = listeners
        # What the notifier delivered (the page and the API join it to incidents).
        self.deliveries = Deliveries(settings.state_dir)
        self.history = open_history(settings)
        if (problem := self.history.check()) is not None:
            log.error("%s: %s", problem, MEMORY_ONLY)
        self.alerts = self._alert_notifier(settings, clock)
        if self.alerts is not None:
            self._listeners = (*listeners, self.alerts)
        self._reload = reload
        # What SIGTERM, SIGINT and SIGHUP ask of the main loop (util/signals.py).
        self._requests = Requests()
        self.notifier = Notifier() if notifier is None else notifier
        self._last_ping: float | None = None
        self._ping_withheld = False
        self.job_store = open_job_store(settings)
        # Targets of one server judge its locks once between them (state/servers.py).
        self.servers = ServerMap(settings.targets)
        self.runners = [self._runner(target) for target in settings.targets]
        self.scheduler = PollScheduler()
        self.metrics = self._metrics()
        self.http = HttpServer(
            self.board,
            self.metrics,
            settings.listen,
            self._stale_after(self.runners),
            web=settings.web,
            also_listen=also_listen,
            telemetry_path=telemetry_path,
        )
        self.http.incidents = self.history
        self.http.deliveries = self.deliveries
        if self.job_store is not None:
            self.http.pings = PingReceiver(
                jobs=pinged_jobs(settings), token=settings.pings.token, store=self.job_store
            )

    def _alert_notifier(self, settings: Settings, clock: Clock) -> AlertNotifier | None:
        """Notifications, delivered from threads of their own: the poll threads
        only hand each poll's incidents over."""
        if not settings.notify.channels:
            return None
        # The notify package (its renderers, transports and requests) is loaded
        # by a lockwatch that notifies, not by every one.
        from lockwatch.notify.election import open_election
        from lockwatch.notify.service import AlertNotifier

        return AlertNotifier(
            settings.notify,
            settings.state_dir,
            targets=[target.name for target in settings.targets],
            external_url=f"{settings.web_url}/",
            clock=clock,
            deliveries=self.deliveries,
            # replicas of this shard: one sender, elected in the shared store
            election=open_election(settings, self.fleet.shard),
        )

    def _metrics(self) -> Metrics:
        """What /metrics renders: the board, how late polls start, the notifier."""
        web = WebLinks(self.settings.web_url, self.settings.runbooks)
        metrics = Metrics(self.board, web=web)
        metrics.registry.register(LatenessCollector(self.scheduler.lateness))
        metrics.registry.register(HistoryStoreCollector(self.history))
        self._alerts_collector = None if self.alerts is None else self.alerts.collector()
        if self._alerts_collector is not None:
            metrics.registry.register(self._alerts_collector)
        return metrics

    def _runner(self, target: Target) -> TargetRunner:
        runner = TargetRunner(
            target,
            self.board,
            self.store,
            self._clock,
            self._listeners,
            jobs=self.settings.jobs,
            job_store=self.job_store,
            history=self.history,
            runbooks=self.settings.runbooks,
            servers=self.servers,
        )
        runner.incidents.reopen_grace = self.settings.incidents.reopen_grace
        return runner

    @staticmethod
    def _stale_after(runners: list[TargetRunner]) -> float:
        """Seconds without a finished poll after which the loop counts as stalled
        (an unreachable target is looked at only every BACKOFF_CAP at most)."""
        gap = max((r.target.longest_gap for r in runners), default=0.0)
        return max(3 * gap, 10.0, BACKOFF_CAP) + max(
            (r.target.connect_timeout + r.poll_timeout for r in runners), default=0.0
        )

    def _status_line(self) -> str:
        return f"watching {len(self.runners)} target(s)"

    def start(self) -> None:
        self.metrics.registry.register(FleetCollector(self.fleet.status))
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
        settle_garbage_collector()
        start_spread(self.runners, self.scheduler)
        self.fleet.start()
        self.notifier.ready(self._status_line())

    def run_forever(self) -> None:
        """Block until SIGTERM/SIGINT (or ``stop()``), reloading on SIGHUP;
        handlers only put a request (util/signals.py)."""

        def stop_requested(signum: int, frame: FrameType | None) -> None:
            self.request_stop()

        def reload_requested(signum: int, frame: FrameType | None) -> None:
            self.request_reload()

        handlers = {signal.SIGTERM: stop_requested, signal.SIGINT: stop_requested}
        handlers[signal.SIGHUP] = reload_requested
        previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
        try:
            self.start()
            self.watch()
        finally:
            self.stop()
            for sig, old in previous.items():
                signal.signal(sig, old)

    def request_reload(self) -> None:
        """Have the main loop read the config again (what SIGHUP does); safe
        in a signal handler."""
        self._requests.put(RELOAD)

    def request_stop(self) -> None:
        """Have the main loop end (what SIGTERM does); safe in a signal handler."""
        self._requests.put(STOP)

    def watch(self) -> None:
        while not self.stop_event.is_set():
            requests = self._requests.wait(self._next_look(time.monotonic()))
            if STOP in requests or self.stop_event.is_set():
                return
            now = time.monotonic()
            for runner in self.runners:
                runner.check_watchdog(now)
            if RELOAD in requests:
                self.reload()
            self._follow_fleet()
            self._unreachable.observe(self.board.views(), time.monotonic())
            self.keep_alive(time.monotonic())

    def _next_look(self, now: float) -> float:
        """Seconds until the main loop's next round: WATCHDOG_TICK, or sooner
        when a poll step in progress reaches its limit (one that has not
        started yet reaches it no sooner than its limit from now)."""
        soonest = WATCHDOG_TICK
        for runner in self.runners:
            session = runner.session
            started = session.busy_since
            left = session.step_limit if started is None else started + session.step_limit - now
            soonest = min(soonest, max(0.0, left) + PAST_LIMIT)
        return soonest

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
            self.configured = settings
            self.fleet.configure(settings)
            self._apply(self.fleet.watched(settings))
            return True
        finally:
            self.notifier.ready(self._status_line())

    def _apply(self, settings: Settings, what: str = "config reloaded") -> None:
        """Swap targets: unchanged ones keep their runner, changed ones get a new
        runner that takes over the old one's state (or a set-aside one's, for a
        target rediscovered), removed ones stop."""
        old = {runner.target.name: runner for runner in self.runners}
        runners: list[TargetRunner] = []
        counts = {"kept": 0, "changed": 0, "added": 0, "removed": 0}
        jobs_changed = settings.jobs != self.settings.jobs
        if settings.notify != self.settings.notify:
            self._renotify(settings)  # before the runners: new ones tell the new channels
        self.settings = replace(self.settings, jobs=settings.jobs)
        if self.http.pings is not None:
            self.http.pings.jobs = pinged_jobs(settings)
        self.servers.arrange(settings.targets)
        replaced: dict[str, TargetRunner | None] = {}  # target -> the runner it replaces
        for target in settings.targets:
            previous = old.pop(target.name, None) or self._unpark(target.name)
            if (
                previous is not None
                and not previous.stop_event.is_set()
                and previous.target == target
                and not jobs_changed
            ):
                runners.append(previous)
                counts["kept"] += 1
            else:
                replaced[target.name] = previous
        # All at once: a withdrawn fleet stops polling now, and a thousand
        # changed targets take one grace, not one grace after another.
        stop_together([*(r for r in replaced.values() if r is not None), *old.values()])
        for target in settings.targets:
            if target.name not in replaced:
                continue
            runner, previous = self._runner(target), replaced[target.name]
            if previous is not None:
                runner.take_over(previous)
                runner.incidents.reopen_grace = settings.incidents.reopen_grace
            counts["changed" if previous is not None else "added"] += 1
            runners.append(runner)
            runner.start(self.scheduler)
        for removed in old.values():
            self._set_aside(removed)
            counts["removed"] += 1
        self.runners = runners
        self.http.stale_after = self._stale_after(runners)
        for setting in RESTART_ONLY:
            if getattr(settings, setting) != getattr(self.settings, setting):
                log.warning("config reload: a new %s takes effect at the next restart", setting)
        self.settings = replace(
            settings, **{name: getattr(self.settings, name) for name in RESTART_ONLY}
        )
        log.info(
            "%s: %d target(s) unchanged, %d changed, %d added, %d removed",
            what,
            *counts.values(),
        )

    def _renotify(self, settings: Settings) -> None:
        """A changed notify section, applied at once: the runners tell the new
        channels from now on, the old workers stop (their outboxes saved in
        the state dir, which the new ones start from)."""
        old, old_collector = self.alerts, self._alerts_collector
        kept = replace(
            settings,
            **{name: getattr(self.settings, name) for name in RESTART_ONLY},
        )
        self.alerts = self._alert_notifier(kept, self._clock)
        self._listeners = (*self._base_listeners, *([self.alerts] if self.alerts else []))
        for runner in self.runners:
            runner.listeners = self._listeners
        if old is not None:
            old.stop(STOP_GRACE)
        if old_collector is not None:
            self.metrics.registry.unregister(old_collector)
        self._alerts_collector = None if self.alerts is None else self.alerts.collector()
        if self.alerts is not None and self._alerts_collector is not None:
            self.metrics.registry.register(self._alerts_collector)
            self.alerts.start()
        log.info("config reload: notify applied (%d channel(s))", len(settings.notify.channels))

    def stop(self) -> None:
        self.notifier.stopping()
        self.stop_event.set()
        self._requests.put(STOP)  # a main loop in another thread (the demo's) ends now
        self.fleet.stop()
        stop_together(self.runners)
        self.scheduler.close()
        if self.alerts is not None:
            self.alerts.stop(STOP_GRACE)
        self.http.stop()
        if self.job_store is not None:
            self.job_store.close()
        self.history.close()
        self.notifier.close()
        if self.state_lock is not None:
            self.state_lock.release()
        log.info("lockwatch stopped")

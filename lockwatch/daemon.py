"""The loop: sample -> snapshot -> detect -> publish, one thread per target.

Each target runs on its own deadline schedule, so a server that stops
answering delays nobody else; a watchdog breaks polls that hang past their
timeout. Any unexpected exception in a poll is logged with its traceback and
the loop goes on.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from types import FrameType

from lockwatch.board import Board, TargetView
from lockwatch.detect.locks import detect_locks
from lockwatch.detect.targets import detect_target_down
from lockwatch.holds import HoldTracker
from lockwatch.ledger import FindingLedger, Transitions
from lockwatch.model import Finding, FindingKind, LockSnapshot, TargetStatus
from lockwatch.publish.http import HttpServer
from lockwatch.publish.metrics import build_registry
from lockwatch.sample.pg_locks import PgLockSampler, SampleError
from lockwatch.settings import Settings, Target
from lockwatch.statefile import StateStore

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
WATCHDOG_TICK = 0.2
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


@dataclass
class TargetRunner:
    """Polls one target on its schedule and publishes what it finds."""

    target: Target
    board: Board
    store: StateStore
    clock: Clock = utc_now
    listeners: tuple[TransitionListener, ...] = ()
    stop_event: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.sampler = PgLockSampler(
            self.target.dsn,
            connect_timeout=self.target.connect_timeout,
            statement_timeout=self.target.statement_timeout,
        )
        self.tracker = HoldTracker(continuity_gap=max(3 * self.target.interval, 30.0))
        self.ledger = FindingLedger()
        self.poll_started: float | None = None  # monotonic, while a poll runs
        self.poll_timeout = self.target.connect_timeout + self.target.statement_timeout + 1.0
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
        self.poll_started = time.monotonic()
        self._aborted = False
        try:
            status = self._sample()
        finally:
            self.poll_started = None
        if status.snapshot is None and self.stop_event.is_set():
            # A poll broken by shutdown says nothing about the target.
            return self._view
        now = status.checked_at
        if status.snapshot is not None:
            current = detect_locks(status.snapshot, self.target.locks, now)
            transitions = self.ledger.update(current)
        else:
            transitions = self.ledger.update(detect_target_down(status, now), keep=LOCK_KINDS)
        view = TargetView(
            target=self.target,
            status=status,
            polls_total=self._view.polls_total + 1,
            poll_errors_total=self._view.poll_errors_total + (0 if status.up else 1),
            state_write_errors_total=self._view.state_write_errors_total,
            last_success=now if status.up else self._view.last_success,
            findings=transitions.active,
        )
        if not self._persist(now, changed=bool(transitions.fired or transitions.resolved)):
            view = replace(view, state_write_errors_total=view.state_write_errors_total + 1)
        self._view = view
        self.board.publish(view)
        for listener in self.listeners:
            listener(transitions)
        return view

    def _sample(self) -> TargetStatus:
        try:
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
        self.sampler.close()

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

    def active_findings(self) -> tuple[Finding, ...]:
        return self.ledger.active


class Daemon:
    """Runs every target, the HTTP server and the watchdog until stopped."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Clock = utc_now,
        listeners: tuple[TransitionListener, ...] = (log_transitions,),
    ) -> None:
        self.settings = settings
        self.board = Board()
        self.store = StateStore(settings.state_dir)
        self.stop_event = threading.Event()
        self.runners = [
            TargetRunner(target, self.board, self.store, clock, listeners, self.stop_event)
            for target in settings.targets
        ]
        stale_after = max(3 * max(t.interval for t in settings.targets), 10.0) + max(
            r.poll_timeout for r in self.runners
        )
        self.registry = build_registry(self.board)
        self.http = HttpServer(self.board, self.registry, settings.listen, stale_after)

    def start(self) -> None:
        self.http.start()
        host, port = self.http.address
        log.info(
            "lockwatch listening on http://%s:%d/ watching %d target(s)",
            f"[{host}]" if ":" in host else host,
            port,
            len(self.runners),
        )
        for runner in self.runners:
            runner.start()

    def run_forever(self) -> None:
        """Block until SIGTERM/SIGINT (or ``stop()``); handlers only set a flag."""

        def request_stop(signum: int, frame: FrameType | None) -> None:
            self.stop_event.set()

        previous = {
            sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            self.start()
            self.watch()
        finally:
            self.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def watch(self) -> None:
        while not self.stop_event.wait(WATCHDOG_TICK):
            now = time.monotonic()
            for runner in self.runners:
                runner.check_watchdog(now)

    def stop(self) -> None:
        self.stop_event.set()
        deadline = time.monotonic() + STOP_GRACE
        for runner in self.runners:
            runner.join(timeout=max(0.0, deadline - time.monotonic()))
        for runner in self.runners:
            runner.sampler.abort()
            runner.join(timeout=STOP_GRACE)
        self.http.stop()
        log.info("lockwatch stopped")

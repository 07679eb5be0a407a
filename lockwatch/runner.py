"""One target's loop: its monitors on their deadline, the ledger, the state dir and the board.

A poll is three steps. *Sample*: open (or reuse) the target's session and do every read
of the poll: each monitor's sources (locks first), whether the sessions at the root of
open incidents still exist, what ``lockwatch terminate`` appended, whether a serverless
server has other clients. *Judge*: pure, from what was sampled and the state the last
poll left: each monitor's detectors, the ledger's transitions, the incidents; no read,
and no book asked for its own state mid-decision. *Apply*: the incident history, the
state file, the board, the listeners. A monitor that breaks is logged and its findings
are held; it never costs the others their poll. The runner's polls run on a poller of
the ``PollScheduler`` (scheduler.py), which plans the next one when a poll ends; the
watchdog thread breaks a network step that hangs past its limit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TypeVar

from lockwatch.detect.incidents import tell_incidents
from lockwatch.detect.targets import (
    detect_privileges_missing,
    detect_target_down,
    detect_transaction_pooled,
)
from lockwatch.model.findings import Finding, FindingKind
from lockwatch.model.incident_text import RUNBOOKS_PATH
from lockwatch.model.incidents import Incident, IncidentChanges
from lockwatch.model.views import TargetStatus
from lockwatch.monitors.base import Monitor, MonitorResult, PollContext
from lockwatch.monitors.jobs import JobMonitor
from lockwatch.monitors.locks import LockMonitor
from lockwatch.monitors.queues import QueueMonitor
from lockwatch.poll import Poll, sessions_alive
from lockwatch.rest import Rest, look_alone
from lockwatch.sample.base import SampleError
from lockwatch.sample.session import TargetSession
from lockwatch.scheduler import PollScheduler, Seat
from lockwatch.settings.jobs import JobSpec
from lockwatch.settings.targets import Target
from lockwatch.state.actions import ActionInbox, take_actions
from lockwatch.state.board import Board
from lockwatch.state.incident_history import IncidentHistory
from lockwatch.state.incidents import IncidentBook
from lockwatch.state.jobstore import JobStore
from lockwatch.state.ledger import FindingLedger, Transitions, log_findings
from lockwatch.state.pace import PollPace
from lockwatch.state.servers import ServerMap
from lockwatch.state.statefile import StateStore
from lockwatch.state.target_view import TargetView
from lockwatch.util.clock import Clock, utc_now
from lockwatch.util.memory import give_back

log = logging.getLogger(__name__)

# What a poll did to its target's incidents, told to the notifier, the log, the demo.
IncidentListener = Callable[[IncidentChanges], None]
R = TypeVar("R")
STOP_GRACE = 2.0  # seconds a poll in flight may take to finish at shutdown


def build_monitors(
    target: Target,
    session: TargetSession,
    jobs: Sequence[JobSpec] = (),
    job_store: JobStore | None = None,
    clock: Clock = utc_now,
) -> tuple[Monitor, ...]:
    """Everything a target samples, its locks first."""
    monitors: list[Monitor] = [LockMonitor(target, session)]
    if target.queues or target.workers:
        monitors.append(QueueMonitor(target))
    own_jobs = [job for job in jobs if job.target == target.name]
    if own_jobs:
        monitors.append(JobMonitor(target, own_jobs, job_store, started_at=clock()))
    return tuple(monitors)


def start_spread(runners: Sequence[TargetRunner], scheduler: PollScheduler) -> None:
    """Start the runners, their first polls spread over their intervals: targets
    started together would otherwise poll together, every interval, in one burst."""
    for index, runner in enumerate(runners):
        runner.start(scheduler, delay=runner.target.interval * index / len(runners))


@dataclass
class TargetRunner:
    """Polls one target on its schedule and publishes what it finds."""

    target: Target
    board: Board
    store: StateStore
    clock: Clock = utc_now
    listeners: tuple[IncidentListener, ...] = ()
    stop_event: threading.Event = field(default_factory=threading.Event)
    jobs: tuple[JobSpec, ...] = ()  # every configured job; the runner follows its own
    job_store: JobStore | None = None
    # lockwatch's own intervals: hold times follow it when the wall clock jumps.
    monotonic: Callable[[], float] = time.monotonic
    history: IncidentHistory | None = None  # where resolved incidents are kept
    runbooks: str = RUNBOOKS_PATH  # the base of the next steps' runbook links
    # the targets of the daemon by server: which databases' locks this one judges
    servers: ServerMap | None = None

    def __post_init__(self) -> None:
        self.session = TargetSession(
            self.target.dsn,
            connect_timeout=self.target.connect_timeout,
            statement_timeout=self.target.statement_timeout,
            seat=None if self.servers is None else self.servers.seat(self.target.name),
        )
        self.monitors = build_monitors(
            self.target, self.session, self.jobs, self.job_store, self.clock
        )
        self.ledger = FindingLedger(self.target.name)
        self.incidents = IncidentBook(
            self.target.name,
            on_resolved=self._resolved_outside_poll,
            runbooks=self.runbooks,
            episode_gap=self.target.locks.episode_gap,
        )
        # What lockwatch terminate did, from the state dir onto the incidents' timelines.
        self.actions = ActionInbox(self.store.directory, self.target.name)
        # Monotonic time the scheduled poll running now (or last) was due; how
        # late polls start is read from it (bench/scale.py).
        self.poll_due: float | None = None
        self._failing_since: datetime | None = None
        self.rest = Rest(self.target)  # a serverless target's: lockwatch its only client?
        self._judging = False  # a poll's resolved incidents go to the history when applied
        self.pace = PollPace(self.target.interval)  # slower while the lock manager is contended
        self._view = TargetView(self.target)
        self.seat = Seat(self, self.target.name)  # on a scheduler once started
        self._saved_at: datetime | None = None
        if self.history is not None:
            self.incidents.recall(self.history.resolved())
        self._restore()
        self.board.register(self.target)

    def _restore(self) -> None:
        document = self.store.load(self.target.name)
        if document is None:
            return
        try:
            for monitor in self.monitors:
                monitor.restore(document)
            self.ledger.load(document.get("findings") or [])
            # A state file of an older lockwatch has none: they open afresh.
            self.incidents.load(document.get("incidents") or [])
            self.actions.load(document.get("actions"))
        except Exception as exc:  # a state file is never a reason not to start
            self.store.discard(self.target.name, f"cannot be restored: {type(exc).__name__}")
            self.ledger = FindingLedger(self.target.name)
            self.incidents.load([])
            return
        self._view = TargetView(
            self.target,
            findings=self.ledger.active,
            incidents=self.incidents.open,
            resolved_incidents=self.incidents.recent,
        )
        log.info(
            "%s: restored %d hold times, %d active findings and %d open incidents from the "
            "state dir",
            *(self.target.name, len(self.lock_monitor.tracker)),
            *(len(self.ledger.active), len(self.incidents.open)),
        )

    @property
    def lock_monitor(self) -> LockMonitor:
        monitor = self.monitors[0]
        assert isinstance(monitor, LockMonitor)  # build_monitors puts it first
        return monitor

    # -- one poll -----------------------------------------------------------

    def poll_once(self) -> TargetView:
        poll = self._sample()
        if poll is None:
            return self._view  # a poll broken by shutdown says nothing about the target
        status, transitions = self._judge(poll)
        view = self._apply(poll, status, transitions)
        give_back(0 if status.snapshot is None else len(status.snapshot.locks))  # its garbage
        return view

    def _sample(self) -> Poll | None:
        """Every read of the poll, before anything is judged; None when
        shutdown broke it."""
        connect_error = self._connect()
        db = None if connect_error else self.session
        context = PollContext(
            self.clock(), db, monotonic=self.monotonic(), spacing=self.pace.spacing
        )
        poll = Poll(context, connect_error)
        for index, monitor in enumerate(self.monitors):
            sampled = self._guarded(monitor, monitor.sample, poll.context)
            if sampled is None:
                poll.broken.add(index)
            else:
                poll.read(sampled)
            if poll.snapshot is None and self.stop_event.is_set():
                return None
        poll.previous = self.incidents.finding_roots()
        if connect_error is None and poll.target_error is None and poll.snapshot is not None:
            poll.alive = sessions_alive(self.incidents.open, poll.snapshot, self.session)
            poll.alone = (
                look_alone(self.target, self.session, poll.snapshot)
                if self.target.serverless
                else None
            )
        take_actions(self.actions, self.incidents, self.history)
        poll.monotonic = self.monotonic()
        return poll

    def _judge(self, poll: Poll) -> tuple[TargetStatus, Transitions]:
        """Findings, transitions and incidents from what ``poll`` sampled and
        the state the last poll left: no read."""
        for index, monitor in enumerate(self.monitors):
            result = (
                None
                if index in poll.broken
                else self._guarded(monitor, monitor.judge, poll.context)
            )
            poll.add(self._held(monitor) if result is None else result)
        status = self._status(poll, poll.connect_error)
        self.pace.reached(poll.connect_error is None)  # an unreachable target: backing off
        if status.snapshot is not None:
            paced = self.pace.observe(status.snapshot.lock_manager_waits)
            if paced is not None:
                log.warning("%s: %s", self.target.name, paced)
        if not status.up:
            poll.findings.extend(detect_target_down(status, status.checked_at))
        poll.findings.extend(detect_transaction_pooled(self.target.name, status.pooling))
        poll.findings.extend(
            detect_privileges_missing(self.target.name, self.session.visibility, status.checked_at)
        )
        transitions = self.ledger.update(poll.findings, keep=poll.held_kinds, hold=poll.undecided)
        roots = tell_incidents(transitions.active, status.snapshot, poll.previous)
        self._judging = True
        try:
            changes = self.incidents.update(
                roots, status.checked_at, poll.monotonic, poll.alive, snapshot=status.snapshot
            )
        finally:
            self._judging = False
        return status, replace(transitions, incidents=changes)

    def _apply(self, poll: Poll, status: TargetStatus, transitions: Transitions) -> TargetView:
        """What the judgement decided, kept and told: the history, the state
        file, the board, the listeners; a serverless target's session closed
        when it is left to sleep."""
        if self.history is not None:
            for incident in transitions.incidents.resolved:
                self.history.add(incident)
        view = self._next_view(status, transitions)
        asleep = self.rest.decide(poll.alone, status.checked_at, self._view.asleep_since)
        if asleep is not None:
            self.session.close()
        view = replace(view, asleep_since=asleep)
        if view.polls_total == 1 and status.snapshot is not None:
            held = sum(1 for lock in status.snapshot.locks if lock.granted)
            log.info(
                "%s: first poll ok: %d locks held, %d waiting, %.0f ms",
                *(self.target.name, held, len(status.snapshot.locks) - held),
                status.snapshot.poll_seconds * 1000,
            )
        self._view = view
        self.board.publish(view)
        log_findings(transitions)
        for listener in self.listeners:
            listener(transitions.incidents)
        return view

    def _connect(self) -> str | None:
        """Open the session if there is none; the error if it cannot be."""
        try:
            self.session.connect()
        except SampleError as exc:
            return str(exc)
        return None

    def _resolved_outside_poll(self, incident: Incident) -> None:
        """Into the history at once, an incident resolved outside a poll (a
        removed target's); a poll's go there when it is applied."""
        if not self._judging and self.history is not None:
            self.history.add(incident)

    def _guarded(
        self, monitor: Monitor, step: Callable[[PollContext], R], context: PollContext
    ) -> R | None:
        """A monitor's step; None, logged, when it breaks."""
        try:
            return step(context)
        except Exception:
            log.exception(
                "%s: %s failed; its findings stay as they were",
                self.target.name,
                type(monitor).__name__,
            )
            return None

    def _held(self, monitor: Monitor) -> MonitorResult:
        """A broken monitor's findings, held as they were."""
        held = {
            (f.kind, f.subject)
            for f in self.ledger.active
            if f.kind in monitor.kinds
            or (f.kind is FindingKind.TARGET_DOWN and f.subject.source is not None)
        }
        return MonitorResult(undecided=frozenset(held))

    def _status(self, poll: Poll, connect_error: str | None) -> TargetStatus:
        """How sampling the target went, logged once per failure and recovery."""
        now = poll.context.now
        error = connect_error or poll.target_error
        if error is None and poll.snapshot is not None:
            if self._failing_since is not None:
                log.info("%s: sampling again after a failure", self.target.name)
                self._failing_since = None
            return TargetStatus(self.target.name, now, poll.snapshot, pooling=self.session.pooling)
        # Without an error, the lock monitor broke unexpectedly (and logged it).
        error = error or "the advisory locks could not be read (an unexpected error, logged)"
        if self._failing_since is None:
            self._failing_since = now
            log.error("%s: cannot sample: %s", self.target.name, error)
        return TargetStatus(
            self.target.name, now, None, error, self._failing_since, self.session.pooling
        )

    def _next_view(self, status: TargetStatus, transitions: Transitions) -> TargetView:
        view = TargetView(
            target=self.target,
            status=status,
            polls_total=self._view.polls_total + 1,
            poll_errors_total=self._view.poll_errors_total + (0 if status.up else 1),
            state_write_errors_total=self._view.state_write_errors_total,
            last_success=status.checked_at if status.up else self._view.last_success,
            findings=transitions.active,
            incidents=transitions.incidents.active,
            resolved_incidents=self.incidents.recent,
            poll_interval=self.pace.current,
            slots_skipped=dict(self.pace.skipped),
        )
        for monitor in self.monitors:
            view = monitor.publish(view)
        changes = transitions.incidents
        changed = bool(transitions.fired or transitions.resolved or changes.opened)
        changed = changed or bool(changes.worsened or changes.resolved)
        if not self._persist(status.checked_at, changed=changed):
            view = replace(view, state_write_errors_total=view.state_write_errors_total + 1)
        return view

    def _persist(self, now: datetime, *, changed: bool) -> bool:
        """Save when something changed or a monitor asks; False if a save failed."""
        if self.store.directory is None:
            return True
        changed = changed or self.actions.unsaved  # the actions read, with what they noted
        if not (changed or any(m.save_due(now, self._saved_at) for m in self.monitors)):
            return True
        durable = changed or self.lock_monitor.tracker.changed_since_dump()  # else a refresh
        document: dict[str, object] = {}
        for monitor in self.monitors:
            document.update(monitor.save(now))
        document["findings"] = self.ledger.dump()
        document["incidents"] = self.incidents.dump()
        document["actions"] = self.actions.dump()
        saved = self.store.save(self.target.name, document, durable=durable)
        if saved:
            self._saved_at = now
            self.actions.saved()
        return saved

    # -- schedule -----------------------------------------------------------

    def start(self, scheduler: PollScheduler | None = None, delay: float = 0.0) -> None:
        """Poll from now on, the first poll ``delay`` seconds from now, on the
        scheduler's pollers (the daemon's); without one, on a poller of its own."""
        self.seat.start(scheduler, delay)

    def run_due(self, due: float) -> float | None:
        """The poll due at ``due`` (on the scheduler's clock); when the next one
        is due, or None once stopped, after the last save."""
        if not self.stop_event.is_set():
            self.poll_due = due
            try:
                self.poll_once()
            except Exception:
                log.exception("%s: poll failed unexpectedly; polling goes on", self.target.name)
        if self.stop_event.is_set():
            self._finish()
            return None
        return self._next_due(due)

    def _next_due(self, due: float) -> float:
        """One interval after ``due`` (longer while the lock manager is
        contended); a poll that overran it skips the slots it missed. The
        slots of the target's interval left out either way are counted."""
        asleep = self._view.asleep_since is not None
        interval = self.target.sleep.interval if asleep else self.pace.planned()
        next_due = due + interval
        late = self.seat.clock() - next_due
        skipped = int(late // interval) + 1 if late > 0 else 0
        if self.pace.overran(skipped):  # once per run of overruns, not per poll
            log.warning(
                "%s: poll overran its %gs interval by %.1fs; skipping %d slot(s)",
                *(self.target.name, interval, late, skipped),
            )
        return self.pace.spaced(due, next_due + skipped * interval)

    def _finish(self) -> None:
        # Whatever changed since the last save is kept for the next start.
        try:
            self._persist(self.clock(), changed=True)
            self.close()
        finally:
            self.seat.ended()

    def close(self) -> None:
        """Close the target's session and every monitor's sources."""
        self.session.close()
        for monitor in self.monitors:
            try:
                monitor.close()
            except Exception:
                log.exception("%s: closing %s failed", self.target.name, type(monitor).__name__)

    @property
    def poll_timeout(self) -> float:
        """How long one network step of a poll may take before the watchdog breaks it."""
        return self.session.step_limit

    def check_watchdog(self, now: float) -> None:
        if self.session.overdue(now):
            log.warning(
                "%s: poll hung for more than %gs; breaking its connection",
                *(self.target.name, self.session.step_limit),
            )
            self.session.abort()

    def request_stop(self) -> None:
        """Stop polling: the poll in flight ends, or the next is due at once,
        and that one only saves and closes."""
        self.stop_event.set()
        self.seat.hurry()

    def join(self, timeout: float) -> None:
        """Wait for a stopped runner's last save and close."""
        if not self.seat.started:
            return
        if self.stop_event.is_set():  # also a stop event shared and set elsewhere
            self.seat.hurry()
        self.seat.wait(timeout)

    @property
    def finished(self) -> bool:
        """Stopped, saved and closed (or never started)."""
        return self.seat.finished

    def stop(self) -> None:
        """Stop polling and wait for it; a poll still hanging past the grace
        period has its connection broken."""
        self.request_stop()
        self.join(STOP_GRACE)
        self.session.abort()
        self.join(STOP_GRACE)

    def take_over(self, old: TargetRunner) -> None:
        """Carry on from the (stopped) runner this one replaces after a config
        change: hold times, active findings and counters survive the change."""
        previous = {type(monitor): monitor for monitor in old.monitors}
        for monitor in self.monitors:
            if type(monitor) in previous:
                monitor.take_over(previous[type(monitor)])
        self.ledger = old.ledger
        self.incidents = old.incidents
        self.incidents.runbooks = self.runbooks
        self.incidents.episodes.gap = self.target.locks.episode_gap
        self.incidents.on_resolved = self._resolved_outside_poll
        self.actions = old.actions
        self._view = replace(old._view, target=self.target)
        self._failing_since = old._failing_since
        self._saved_at = old._saved_at
        self.pace.skipped, self.pace.spacing = old.pace.skipped, old.pace.spacing
        self.board.register(self.target)

    def active_findings(self) -> tuple[Finding, ...]:
        return self.ledger.active

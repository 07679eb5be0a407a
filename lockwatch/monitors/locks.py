"""A target's advisory locks: read through the target's session, hold times
tracked from first sight, pgbouncer's view of the same server joined in, and
the lock detectors run over the snapshot at each poll.

The lock monitor samples first in every poll: its snapshot is what the queue
monitor follows lock chains through, and a lock read that fails means the
target itself cannot be sampled. Like every monitor, it reads everything
(``sample``) before it judges anything (``judge``): pgbouncer's view is read
before pooled backends are guessed, and the detectors read nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from lockwatch.detect.key_groups import RowPlan
from lockwatch.detect.lock_waits import detect_lock_waits
from lockwatch.detect.locks import detect_locks
from lockwatch.detect.pooler import PoolMemory, infer_pooled
from lockwatch.detect.sources import detect_source_down
from lockwatch.detect.within_hold import HoldMemory, within_hold
from lockwatch.model.catalogue import HeldLocks
from lockwatch.model.findings import Family, FindingKind
from lockwatch.model.keepalive import ServerSettings
from lockwatch.model.locks import LockSnapshot, LockSummary
from lockwatch.model.pooler import PoolerSnapshot
from lockwatch.monitors.base import Monitor, MonitorResult, PollContext, Sampled, StateDocument
from lockwatch.sample.base import SampleContext, SampleError, SourceRunner
from lockwatch.sample.held_locks import HeldLocksReader
from lockwatch.sample.keepalive import server_settings
from lockwatch.sample.locks import AdvisoryLockReader, MovedBackends
from lockwatch.sample.pooler import PgBouncerSampler
from lockwatch.sample.session import TargetSession
from lockwatch.settings.targets import Target
from lockwatch.state.hold_history import HoldHistory
from lockwatch.state.holds import HoldTracker
from lockwatch.state.target_view import TargetView
from lockwatch.state.waiter_seconds import WaiterSeconds

# A lock seen again after at most this many intervals (and never less than
# the floor) counts as held throughout; the interval lockwatch planned, when
# it chose to look less often (a contended lock manager, a poll that overran):
# it could not have seen a release in between at any rate.
CONTINUITY_INTERVALS = 3
CONTINUITY_FLOOR = 30.0
# How much the measured clock offset to the server may move before it is
# measured anew (a read's latency varies by milliseconds, a skew does not).
OFFSET_SLACK = timedelta(seconds=1)
# How long the server's and its roles' orphan-ending settings are kept before
# they are read again.
SETTINGS_MAX_AGE = 300.0


@dataclass(frozen=True, slots=True)
class _Reading:
    """One poll's reads for the lock detectors."""

    snapshot: LockSnapshot
    pooler: PoolerSnapshot | None  # None: no pgbouncer, or it could not be read
    # lockwatch's own session goes through a pooler: so may the clients'
    through_pooler: bool = False


def continuity_gap(target: Target, spacing: float | None = None) -> float:
    """Seconds between two sightings of a lock that count as one hold; with
    ``spacing`` (``PollContext.spacing``), those lockwatch itself planned."""
    return max(CONTINUITY_INTERVALS * max(target.interval, spacing or 0.0), CONTINUITY_FLOOR)


class LockMonitor:
    """Samples a target's advisory locks (and its pooler) and judges them."""

    kinds = FindingKind.of(Family.LOCKS)

    def __init__(self, target: Target, session: TargetSession) -> None:
        self.target = target
        self.reader = AdvisoryLockReader(session)
        self.tracker = HoldTracker(continuity_gap=continuity_gap(target))
        self.history = HoldHistory()
        self.waiter_seconds = WaiterSeconds()  # time blocked on other locktypes
        # The sessions that held the key of each lock finding: one hold, one finding.
        self.holds: HoldMemory = {}
        # The rows sorted into keys at the last poll: a steady flood sorts them once.
        self.plan = RowPlan()
        # Backends seen to be a pooler's from PostgreSQL's view (no admin console).
        self.pool_memory = PoolMemory()
        self._offset: timedelta | None = None  # lockwatch's clock less the server's
        self._moved = MovedBackends()  # the last poll's sessions on lockwatch's clock
        # The last poll's locks summed up: the same tuple again needs no new sum.
        self._summary: LockSummary | None = None
        self.session = session
        # What ends an orphan on this server (lock_orphaned's evidence), and when read.
        self.timeouts: ServerSettings | None = None
        self._timeouts_read = 0.0
        # The per-job and liveness locks the target's queue presets know of.
        self.held_locks = HeldLocksReader(queue.preset for queue in target.queues)
        self.held: HeldLocks = {}
        self.pooler: SourceRunner[PoolerSnapshot] | None = None
        self._reading: _Reading | None = None  # this poll's, from sample to judge
        if target.pgbouncer is not None:
            self.pooler = SourceRunner(
                target.name,
                "pgbouncer",
                PgBouncerSampler(target.pgbouncer.dsn, connect_timeout=target.connect_timeout),
                None,
                target.interval,
            )

    def sample(self, context: PollContext) -> Sampled:
        """Every read of the poll, in one go: the locks (their hold times
        tracked from first sight), the server's orphan-ending settings when
        due, pgbouncer's view, the presets' held locks."""
        self._reading = None
        if context.db is None:
            return Sampled()
        try:
            raw = self.reader.read()
        except SampleError as exc:
            return Sampled(target_error=str(exc))
        now = context.now
        raw = raw.moved(self._clock_offset(now, raw.read_at), self._moved)
        # Past the target's own gap only when lockwatch chose to wait longer
        # (a gap it did not plan, such as an outage or a restart, is not bridged).
        self.tracker.continuity_gap = continuity_gap(self.target, context.spacing)
        locks = self.tracker.observe(
            raw.locks,
            raw.backends,
            now,
            raw.read_at,
            monotonic=context.monotonic,
            spliced=raw.spliced,
        )
        if self._summary is None or self._summary.locks is not locks:
            self._summary = LockSummary.of(locks, self._summary, self.tracker.change)
        snapshot = LockSnapshot(
            target=self.target.name,
            taken_at=now,
            server_version=raw.server_version,
            locks=locks,
            backends=raw.backends,
            poll_seconds=raw.seconds,
            visibility=self.reader.session.visibility,
            summary=self._summary,
            server_seconds=raw.server_seconds,
            lock_manager_waits=raw.lock_manager_waits,
            waits=raw.waits,
        )
        self._timeouts(time.monotonic() if context.monotonic is None else context.monotonic)
        pooled = None if self.pooler is None else self.pooler.poll(SampleContext(now, None))
        if self.held_locks.queries:
            self.held = self.held_locks.read(context.db)
        self._reading = _Reading(snapshot, pooled, self.reader.session.through_pooler)
        return Sampled(snapshot)

    def judge(self, context: PollContext) -> MonitorResult:
        """The lock findings of what ``sample`` read (pgbouncer's view before
        any guess at pooled backends), and the keys' hold history."""
        reading = self._reading
        if reading is None:
            # Nobody knows whether the locks were released: their findings
            # neither resolve nor fire again until the target is back.
            return MonitorResult(held_kinds=self.kinds)
        snapshot, pooled, now = reading.snapshot, reading.pooler, context.now
        self.history.update(self.tracker.ended, self.tracker.began, self.target.locks, now)
        self.waiter_seconds.observe(snapshot.waits, snapshot.backends, now)
        inferred, self.pool_memory = infer_pooled(snapshot, self.pool_memory)
        findings = detect_locks(
            snapshot,
            self.target.locks,
            now,
            pooled,
            history=self.history.keys,
            timeouts=self.timeouts,
            inferred=inferred,
            held=self.held,
            through_pooler=reading.through_pooler,
            plan=self.plan,
        )
        within, self.holds = within_hold(findings, self.holds, snapshot, self.target.locks)
        findings.extend(detect_lock_waits(snapshot, self.target.locks, now))
        if self.pooler is None:
            return MonitorResult(tuple(findings), undecided=within)
        findings.extend(detect_source_down(self.target.name, [self.pooler.health], now))
        return MonitorResult(
            tuple(findings),
            undecided=within,
            # Unread, the pooler cannot say which session locks are pooled.
            held_kinds=frozenset({FindingKind.LOCK_POOLED_SESSION})
            if pooled is None
            else frozenset(),
        )

    def _timeouts(self, monotonic: float) -> None:
        """The server's keepalive and timeout settings and its roles' and
        databases' own, read at the first poll that can and again every
        SETTINGS_MAX_AGE (an ALTER ROLE ... SET is seen then); a failed read
        keeps the last one and is tried again next poll. It costs two queries."""
        if self.timeouts is None or monotonic - self._timeouts_read > SETTINGS_MAX_AGE:
            try:
                with self.session.step("settings read") as conn:
                    self.timeouts = server_settings(conn)
                self._timeouts_read = monotonic
            except SampleError:
                pass

    def _clock_offset(self, now: datetime, read_at: datetime | None) -> timedelta:
        """How far lockwatch's clock is ahead of the server's, as of this poll.

        Kept as it was while it moves by less than OFFSET_SLACK (the time a
        read takes varies): server timestamps moved by it then stay the same
        from poll to poll, and so does what names a transaction."""
        if read_at is None:
            return self._offset or timedelta(0)
        measured = now - read_at
        if self._offset is None or abs(measured - self._offset) > OFFSET_SLACK:
            self._offset = measured
        return self._offset

    def publish(self, view: TargetView) -> TargetView:
        view = replace(
            view,
            lock_history=self.history.published(),
            held_locks=self.held,
            lock_waiter_seconds=self.waiter_seconds.published(),
        )
        if self.pooler is None:
            return view
        return replace(view, sources=(*view.sources, self.pooler.health))

    def save(self, now: datetime) -> StateDocument:
        return {"holds": self.tracker.dump(now), "hold_history": self.history.dump()}

    def restore(self, document: StateDocument) -> None:
        holds = document.get("holds")
        if isinstance(holds, dict):
            self.tracker.load(holds)
        history = document.get("hold_history")
        if isinstance(history, dict):
            self.history.load(history)

    def save_due(self, now: datetime, saved_at: datetime | None) -> bool:
        # Restored hold times stay trusted for the continuity gap after the
        # last save, so the file is refreshed well within it (and the hold
        # history with it: a crash loses no more than that of it).
        refresh = timedelta(seconds=self.tracker.continuity_gap / 3)
        return self.tracker.changed_since_dump() or saved_at is None or now - saved_at >= refresh

    def take_over(self, old: Monitor) -> None:
        if isinstance(old, LockMonitor):
            old.tracker.continuity_gap = self.tracker.continuity_gap
            self.tracker = old.tracker
            self.history = old.history
            self.waiter_seconds = old.waiter_seconds
            self.holds = old.holds
            self.pool_memory = old.pool_memory

    def close(self) -> None:
        if self.pooler is not None:
            self.pooler.close()

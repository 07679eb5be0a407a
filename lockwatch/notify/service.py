"""The notifier: one delivery thread per channel, apart from the poll loop.

The poll threads only hand over each target's open and just-resolved
incidents (:meth:`AlertNotifier.__call__`, an incidents listener); each
channel's thread decides what is due, keeps it in its outbox in the state dir, and
delivers it, retrying transient failures with backoff and jitter and
honouring a receiver's ``retry_after``. A receiver that hangs delays only its
own channel, and never a poll. Each delivered message is reported through
``deliveries``, the notifier's own record (the page and the API join it to
the incident's timeline).

With an :class:`~lockwatch.notify.election.Election` (replicas of a shard),
only the elected sender evaluates and delivers, and a channel's state lives in
the shared store instead of the state dir: read afresh at each new lease
term, saved under the lease's token before anything it queued goes out.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Collection
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client.registry import Collector

from lockwatch.model.incidents import IncidentChanges, Resolution
from lockwatch.notify.alertmanager import AlertmanagerWorker
from lockwatch.notify.election import Election
from lockwatch.notify.inbox import DEFAULT_BACKOFF, Backoff, Inbox
from lockwatch.notify.living import deliver, edits
from lockwatch.notify.message import Headline, Message
from lockwatch.notify.metrics import NotifierCollector
from lockwatch.notify.outbox import ChannelState, Pending, evaluate
from lockwatch.notify.slack_api import make_transport
from lockwatch.notify.transports import Transport, TransportError
from lockwatch.settings.notify import SEND_MARGIN, AlertmanagerChannel, Channel, NotifySettings
from lockwatch.state.deliveries import Deliveries
from lockwatch.state.pgstore import StoreError
from lockwatch.state.statefile import StateStore
from lockwatch.util.clock import Clock, utc_now

if TYPE_CHECKING:
    import requests

log = logging.getLogger(__name__)

TICK = 1.0  # seconds between looks at `for` and repeat deadlines
MAX_OUTBOX = 1000  # messages kept per channel while its receiver is away


class ChannelWorker:
    """Decides, keeps and delivers the messages of one channel, in order."""

    def __init__(
        self,
        channel: Channel,
        settings: NotifySettings,
        transport: Transport,
        store: StateStore,
        *,
        clock: Clock = utc_now,
        backoff: Backoff = DEFAULT_BACKOFF,
        targets: Collection[str] = (),
        deliveries: Deliveries | None = None,
        election: Election | None = None,
    ) -> None:
        self.channel = channel
        self.election = election
        self._term: int | None = None  # the lease token the state was read under
        self._unsaved = False  # the state holds what the shared store refused
        self.deliveries = deliveries
        self.settings = settings
        self.transport = transport
        self.living = edits(transport)  # one message per incident, edited in place
        self.store = store
        self.clock = clock
        self.backoff = backoff
        self.sent_total = 0
        self.failed_total = 0  # given up: refused for good, or undeliverable too long
        self.errors_total = 0  # attempts that failed and will be retried
        self._rng = random.SystemRandom()  # jitter only; any source will do
        self._wake = threading.Event()
        self.inbox = Inbox(self._wake.set)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing: str | None = None  # the last transient error, until a success
        self._refusals: set[str] = set()  # permanent errors already logged
        self._targets = tuple(targets)
        # Elected: the shared store's state, read when this replica becomes the sender.
        self.state = (
            ChannelState() if election is not None else self._restore(self.store.load(self.name))
        )

    @property
    def name(self) -> str:
        return self.channel.name

    @property
    def pending(self) -> int:
        return len(self.state.outbox)

    def _restore(self, document: dict[str, Any] | None) -> ChannelState:
        try:
            state = ChannelState() if document is None else ChannelState.load(document)
        except Exception as exc:  # a state file is never a reason not to start
            if self.election is None:
                self.store.discard(self.name, f"cannot be restored: {type(exc).__name__}")
            document, state = None, ChannelState()
        if self._targets:
            self._resolve_removed(state, self._targets)
        if document is not None:
            log.info(
                "notify %s: restored %d announced incidents and %d pending messages",
                self.name,
                len(state.announced),
                len(state.outbox),
            )
        return state

    def _resolve_removed(self, state: ChannelState, targets: Collection[str]) -> None:
        """Incidents announced for a target no longer configured: nobody will poll
        it, so they are told ended at the first step, once: no longer watched,
        not resolved (nobody saw them end), as a target removed by a reload."""
        removed = Counter(
            told.notice.target
            for told in state.announced.values()
            if told.notice.target not in targets
        )
        for key, told in list(state.announced.items()):
            if told.notice.target in removed:
                unwatched = replace(told.notice, resolution=Resolution.UNWATCHED.value)
                state.announced[key] = replace(told, notice=unwatched)
        for target, count in sorted(removed.items()):
            self.inbox.close_target(target)
            log.warning(
                "notify %s: target %s is no longer configured; its %d announced "
                "incident(s) are told no longer watched",
                self.name,
                target,
                count,
            )

    # -- the worker thread --------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=f"notify-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                wait = self.step()
            except Exception:
                log.exception("notify %s: unexpected error; notifying goes on", self.name)
                wait = TICK
            self._wake.wait(min(TICK, wait))

    def step(self) -> float:
        """Queue what is due, deliver what can be; seconds until the next attempt."""
        if self.election is not None and not self._leading():
            return TICK
        now = self.clock()
        mail = self.inbox.take()
        latest, resolved = mail.latest, mail.resolved
        active = [incident for incidents in latest.values() for incident in incidents]
        before = self.state.announced
        announced, messages = evaluate(
            self.name,
            self.settings,
            before,
            active,
            resolved,
            latest.keys(),
            now,
            lambda: uuid.uuid4().hex,
        )
        self.state.announced = announced
        if messages:
            self.state.queue(messages, now, living=self.living is not None)
            self._trim()
        if messages or announced.keys() != before.keys() or self._unsaved:
            self._save()
        return TICK if self._unsaved else self._deliver()

    def _leading(self) -> bool:
        """Whether this replica sends now; a new lease term reads the shared state."""
        assert self.election is not None
        term = self.election.term
        if term is None:
            if self._term is not None:
                self._term, self.state = None, ChannelState()  # the next sender's now
            # What resolved meanwhile, kept for a takeover to tell its final state.
            self.inbox.keep_resolved_since(self.clock() - timedelta(seconds=2 * self.election.ttl))
            return False
        if term != self._term:
            try:
                document = self.election.load(self.name)
            except StoreError as exc:
                log.warning("notify %s: the shared state cannot be read: %s", self.name, exc)
                return False
            self.state, self._term, self._unsaved = self._restore(document), term, False
        return True

    def _trim(self) -> None:
        excess = len(self.state.outbox) - MAX_OUTBOX
        if excess > 0:
            del self.state.outbox[:excess]
            self.failed_total += excess
            log.error(
                "notify %s: %d undelivered messages dropped: the outbox keeps at most %d",
                self.name,
                excess,
                MAX_OUTBOX,
            )

    def _deliver(self) -> float:
        while self.state.outbox and not self._stop.is_set() and not self._unsaved:
            pending = self.state.outbox[0]
            now = self.clock()
            if pending.next_attempt > now:
                return (pending.next_attempt - now).total_seconds()
            needed = self.settings.send_deadline + SEND_MARGIN
            if self.election is not None and not self.election.may_send(needed):
                return TICK  # a replica that takes over may send it: never both
            age = (now - pending.message.created_at).total_seconds()
            if pending.attempts and age > self.backoff.give_up_after:
                self._drop(f"undeliverable for {age:.0f}s: {self._failing or 'no success'}")
                continue
            try:
                answer = self._send(pending.message, now)
            except TransportError as exc:
                if exc.permanent:
                    self._drop(str(exc))
                    continue
                if exc.unanswered and pending.unanswered >= self.settings.unanswered_retries:
                    self._drop(
                        f"{exc}; not sent again after {pending.unanswered + 1} unanswered "
                        f"attempt(s) (unanswered_retries: {self.settings.unanswered_retries})"
                    )
                    continue
                self._retry(pending, exc)
                continue
            self.state.outbox.pop(0)
            self._save()
            # Counted once saved: a crash between the answer and the save would
            # send the message again, the one way a message can arrive twice.
            self.sent_total += 1
            self._tell_notified(pending.message)
            if self._failing is not None:
                log.info("notify %s: delivering again (%s)", self.name, answer)
                self._failing = None
            else:
                log.debug("notify %s: delivered %s (%s)", self.name, pending.message.id, answer)
        return TICK

    def _send(self, message: Message, now: datetime) -> str:
        if self.living is None:
            return self.transport.send(message)
        return deliver(self.living, message, self.state.threads, now)

    def _tell_notified(self, message: Message) -> None:
        notice = message.notice
        # A living message edited as it grew rang no phone: not a timeline event.
        if self.deliveries is None or notice is None or message.headline is Headline.UPDATED:
            return
        # told under another replica's id after a takeover: recorded under this one's
        mine = self.inbox.incident_id(notice.target, notice.fingerprint)
        self.deliveries.record(notice.target, mine or notice.incident, self.name, self.clock())

    def _retry(self, pending: Pending, exc: TransportError) -> None:
        attempts = pending.attempts + 1
        delay = self.backoff.after(attempts, exc.retry_after, self._rng)
        now = self.clock()
        self.state.outbox[0] = replace(
            pending,
            attempts=attempts,
            next_attempt=now + timedelta(seconds=delay),
            unanswered=pending.unanswered + exc.unanswered,
        )
        self.errors_total += 1
        reason = str(exc)
        if exc.unanswered:
            # Said each time: each send again may tell the receiver twice.
            log.warning(
                "notify %s: %s; sending it again in %.1fs (%d of unanswered_retries: %d)",
                self.name,
                reason,
                delay,
                pending.unanswered + 1,
                self.settings.unanswered_retries,
            )
        elif reason != self._failing:
            log.warning(
                "notify %s: delivery failed, retrying in %.1fs (%d pending): %s",
                self.name,
                delay,
                len(self.state.outbox),
                reason,
            )
        self._failing = reason

    def _drop(self, reason: str) -> None:
        self.state.outbox.pop(0)
        self.failed_total += 1
        self._save()
        if reason not in self._refusals:
            self._refusals.add(reason)
            log.error("notify %s: message dropped, not retried: %s", self.name, reason)

    def _save(self) -> None:
        if self.election is None:
            self.store.save(self.name, self.state.dump())
        elif self._term is not None:
            self._unsaved = not self.election.save(self.name, self.state.dump(), self._term)


class AlertNotifier:
    """An incidents listener that feeds every channel's worker."""

    def __init__(
        self,
        settings: NotifySettings,
        state_dir: Path | None,
        *,
        targets: Collection[str] = (),
        external_url: str = "",
        clock: Clock = utc_now,
        backoff: Backoff = DEFAULT_BACKOFF,
        session: requests.Session | None = None,
        deliveries: Deliveries | None = None,
        election: Election | None = None,
    ) -> None:
        self.election = election
        store = StateStore(state_dir, prefix="notify-", keeps="pending and sent notifications")
        self.workers = [
            ChannelWorker(
                channel,
                settings,
                make_transport(channel, settings, external_url=external_url, session=session),
                store,
                clock=clock,
                backoff=backoff,
                targets=targets,
                deliveries=deliveries,
                election=election,
            )
            for channel in settings.channels
            if not isinstance(channel, AlertmanagerChannel)
        ]
        # Alertmanager keeps the state itself: pushed, not kept in an outbox.
        self.alertmanagers = [
            AlertmanagerWorker(
                channel,
                settings,
                clock=clock,
                backoff=backoff,
                session=session,
                deliveries=deliveries,
            )
            for channel in settings.channels
            if isinstance(channel, AlertmanagerChannel)
        ]
        if state_dir is None and self.workers and election is None:
            log.warning(
                "notify: no state_dir, so a restart forgets pending notifications "
                "and announces open incidents again"
            )

    def __call__(self, changes: IncidentChanges) -> None:
        target = changes.target
        if not target:
            return
        for worker in self.every_worker:
            worker.inbox.offer(target, changes.active, changes.resolved)

    @property
    def every_worker(self) -> tuple[ChannelWorker | AlertmanagerWorker, ...]:
        return (*self.workers, *self.alertmanagers)

    def start(self) -> None:
        if self.election is not None:
            self.election.start()
        for worker in self.every_worker:
            worker.start()

    def stop(self, timeout: float) -> None:
        """Stop every worker; a delivery in flight has up to ``timeout`` to end,
        and the outbox is on disk (or in the shared store) whatever happens to
        it. The sender's lease goes last, once nothing is sent any more."""
        for worker in self.every_worker:
            worker.stop()
        deadline = time.monotonic() + timeout
        for worker in self.every_worker:
            worker.join(max(0.0, deadline - time.monotonic()))
        if self.election is not None:
            # A delivery still in flight keeps the lease until it runs out:
            # released now, the next sender might send that message too.
            idle = not any(worker.running for worker in self.workers)
            self.election.stop(max(0.0, deadline - time.monotonic()), release=idle)

    def collector(self) -> Collector:
        return NotifierCollector(self.workers, self.election, self.alertmanagers)

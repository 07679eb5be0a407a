"""A ``type: alertmanager`` channel: the open incidents pushed to every
Alertmanager of a cluster, as Prometheus pushes its alerts.

Alertmanager keeps the state (silences, inhibition, routing, one notification
per group across its cluster); lockwatch only tells it, on each change and
every ``resend_interval``, which alerts fire (each ending four intervals later
unless pushed again, so they expire if lockwatch dies) and which ended. Each
Alertmanager has a thread of its own, its own backoff and its own counters:
one that is down or hangs delays none of the others, and none of the polls.
Never push through a load balancer: each Alertmanager must hear every alert.
"""

from __future__ import annotations

import base64
import logging
import random
import threading
import time
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

from prometheus_client.core import CounterMetricFamily, Metric

from lockwatch.notify.am_alerts import Alert, AlertBook, Push, notify_test_alert
from lockwatch.notify.inbox import Backoff, Inbox
from lockwatch.notify.message import Message
from lockwatch.notify.transports import Transport, TransportError, transport_timeouts
from lockwatch.settings.notify import AlertmanagerChannel, NotifySettings
from lockwatch.state.deliveries import Deliveries
from lockwatch.util.clock import Clock

if TYPE_CHECKING:
    import requests

log = logging.getLogger(__name__)

TICK = 1.0  # seconds between looks at `for` deadlines


def host_port(url: str) -> str:
    """An Alertmanager as metrics and logs name it: its host and port only.

    >>> host_port("https://am-0.alertmanager:9093/am"), host_port("http://am")
    ('am-0.alertmanager:9093', 'am:80')
    """
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname or ""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def auth_headers(channel: AlertmanagerChannel) -> dict[str, str]:
    if channel.bearer_token:
        return {"Authorization": f"Bearer {channel.bearer_token}"}
    if channel.username and channel.password:
        pair = f"{channel.username}:{channel.password}".encode()
        return {"Authorization": f"Basic {base64.b64encode(pair).decode()}"}
    return {}


class AlertmanagerClient(Transport):
    """One Alertmanager of a channel: ``POST /api/v2/alerts`` under the total deadline."""

    channel: AlertmanagerChannel

    _HINTS: ClassVar[Mapping[int, str]] = {
        400: "Alertmanager refused the alerts as they are",
        401: "check username and password_file, or bearer_token_file",
        403: "check username and password_file, or bearer_token_file",
        404: "check the url: the Alertmanager's own, with its --web.route-prefix",
        **{
            status: "give the Alertmanager's own url, not one that redirects"
            for status in range(300, 400)
        },
    }

    def __init__(self, channel: AlertmanagerChannel, url: str, **timeouts: Any) -> None:
        super().__init__(channel, **timeouts)
        self.url = url
        self.where = host_port(url)
        self.headers = auth_headers(channel)

    def push(self, documents: list[dict[str, Any]]) -> str:
        answer = self.post(f"{self.url}/api/v2/alerts", documents)
        if 200 <= answer.status < 300:
            return f"HTTP {answer.status}"
        detail = answer.text or "no description"
        raise self.refused(answer, f"Alertmanager {self.where}", detail, self._HINTS)

    def send(self, message: Message) -> str:
        """``notify-test``'s message: a test alert that ends on its own."""
        return self.push([notify_test_alert(self.channel, message.created_at)])


@dataclass(slots=True)
class _Peer:
    """One Alertmanager's client and how pushing to it goes; only its own
    thread changes it (the collector reads its counters)."""

    client: AlertmanagerClient
    wake: threading.Event
    generation: int = -1  # the book's generation it last took
    pushed_at: datetime | None = None
    retry_at: datetime | None = None
    attempts: int = 0  # failed in a row
    pushes_total: int = 0
    errors_total: int = 0
    refused_total: int = 0
    failing: str | None = None
    thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return self.client.url


class AlertmanagerWorker:
    """Pushes one channel's alerts to each of its Alertmanagers, from a thread per
    Alertmanager; the poll threads only hand over their incidents (``offer``)."""

    def __init__(
        self,
        channel: AlertmanagerChannel,
        settings: NotifySettings,
        *,
        clock: Clock,
        backoff: Backoff,
        session: requests.Session | None = None,
        deliveries: Deliveries | None = None,
    ) -> None:
        self.channel = channel
        self.deliveries = deliveries
        self.clock = clock
        self.backoff = backoff
        self.book = AlertBook(channel, settings)
        self._rng = random.SystemRandom()  # jitter only
        self._lock = threading.Lock()  # the book's: each Alertmanager's thread reads it
        self._stop = threading.Event()
        self._refusals: set[str] = set()
        self.peers = [
            _Peer(
                AlertmanagerClient(channel, url, **transport_timeouts(settings, session)),
                threading.Event(),
            )
            for url in channel.urls
        ]
        self.inbox = Inbox(self._wake_all)

    @property
    def name(self) -> str:
        return self.channel.name

    # The notifier's counters, summed over the Alertmanagers.
    @property
    def sent_total(self) -> int:
        return sum(peer.pushes_total for peer in self.peers)

    @property
    def errors_total(self) -> int:
        return sum(peer.errors_total for peer in self.peers)

    @property
    def failed_total(self) -> int:
        return sum(peer.refused_total for peer in self.peers) + self.book.dropped

    @property
    def pending(self) -> int:
        return self.book.untold

    def _wake_all(self) -> None:
        for peer in self.peers:
            peer.wake.set()

    # -- the threads ------------------------------------------------------------

    def start(self) -> None:
        for peer in self.peers:
            peer.thread = threading.Thread(
                target=self._loop,
                args=(peer,),
                name=f"notify-{self.name}-{peer.client.where}",
                daemon=True,
            )
            peer.thread.start()

    def stop(self) -> None:
        """Stop pushing; nothing is resolved on the way out: another replica may
        be pushing the same alerts, and they expire on their own otherwise."""
        self._stop.set()
        for peer in self.peers:
            peer.wake.set()

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for peer in self.peers:
            if peer.thread is not None:
                peer.thread.join(max(0.0, deadline - time.monotonic()))

    def _loop(self, peer: _Peer) -> None:
        while not self._stop.is_set():
            peer.wake.clear()
            try:
                wait = self.step(peer)
            except Exception:
                log.exception("notify %s: unexpected error; pushing goes on", self.name)
                wait = TICK
            peer.wake.wait(min(TICK, wait))

    def step(self, peer: _Peer) -> float:
        """Push to ``peer`` if it is due; seconds until it may be due again."""
        now = self.clock()
        with self._lock:
            self._refresh(now)
            wait = self._wait(peer, now)
            if wait > 0:
                return wait
            push = self.book.payload(peer.url, now)
        if not push.documents:
            peer.generation, peer.pushed_at = push.generation, now
            return TICK
        try:
            answer = peer.client.push(push.documents)
        except TransportError as exc:
            return self._failed(peer, push, exc)
        with self._lock:
            news = self.book.pushed(peer.url, push)
        self._tell_notified(news, now)
        peer.generation, peer.pushed_at, peer.retry_at, peer.attempts = (
            push.generation,
            now,
            None,
            0,
        )
        peer.pushes_total += 1
        if peer.failing is not None:
            log.info(
                "notify %s: Alertmanager %s takes alerts again (%s)",
                self.name,
                peer.client.where,
                answer,
            )
            peer.failing = None
        return TICK

    def _tell_notified(self, alerts: list[Alert], at: datetime) -> None:
        """The first Alertmanager took these alerts: the deliveries say so."""
        if self.deliveries is None:
            return
        for alert in alerts:
            self.deliveries.record(alert.target, alert.incident, self.name, at)

    def _refresh(self, now: datetime) -> None:
        """The book brought up to the latest polls of the targets polled since,
        and of those with an incident whose ``for`` passed (whichever thread
        comes first does it)."""
        mail = self.inbox.take()
        for target in mail.offered | set(self.book.due_targets(now)):
            self.book.update(target, mail.latest.get(target, ()), mail.resolved, now)

    def _wait(self, peer: _Peer, now: datetime) -> float:
        if peer.retry_at is not None:
            return max(0.0, (peer.retry_at - now).total_seconds())
        if peer.pushed_at is None or peer.generation != self.book.generation:
            return 0.0
        since = (now - peer.pushed_at).total_seconds()
        return max(0.0, self.channel.resend_interval - since)

    def _failed(self, peer: _Peer, push: Push, exc: TransportError) -> float:
        peer.errors_total += 1
        reason = str(exc)
        where = peer.client.where
        if exc.permanent:
            # Pushed again at the next change or resend, not sooner: it would say the same.
            peer.refused_total += 1
            peer.generation, peer.pushed_at, peer.retry_at = push.generation, push.at, None
            if reason not in self._refusals:
                self._refusals.add(reason)
                log.error(
                    "notify %s: Alertmanager %s refused the alerts: %s", self.name, where, reason
                )
            return TICK
        peer.attempts += 1
        delay = self.backoff.after(peer.attempts, exc.retry_after, self._rng)
        peer.retry_at = push.at + timedelta(seconds=delay)
        if reason != peer.failing:
            log.warning(
                "notify %s: pushing to Alertmanager %s failed, retrying in %.1fs: %s",
                self.name,
                where,
                delay,
                reason,
            )
        peer.failing = reason
        return delay


def push_test_alert(
    channel: AlertmanagerChannel,
    settings: NotifySettings,
    message: Message,
    session: requests.Session | None = None,
) -> tuple[bool, str, str]:
    """``notify-test``: one test alert pushed to each Alertmanager, once; whether
    every one took it, what each said, and what lockwatch would do next."""
    said: list[str] = []
    then = ""
    for url in channel.urls:
        client = AlertmanagerClient(channel, url, **transport_timeouts(settings, session))
        try:
            said.append(f"{client.where}: {client.send(message)}")
        except TransportError as exc:
            said.append(f"{client.where}: {exc}")
            then = then or (
                "pushing again will not help"
                if exc.permanent
                else "lockwatch would retry with backoff"
            )
    return not then, "; ".join(said), then


def alertmanager_metrics(workers: Collection[AlertmanagerWorker]) -> Iterator[Metric]:
    """Each Alertmanager's pushes and failures, by channel and host:port."""
    labels = ["channel", "alertmanager"]
    pushes = CounterMetricFamily(
        "lockwatch_alertmanager_pushes_total",
        "Pushes of the channel's alerts that the Alertmanager took.",
        labels=labels,
    )
    errors = CounterMetricFamily(
        "lockwatch_alertmanager_errors_total",
        "Pushes to the Alertmanager that failed (retried with backoff, or refused).",
        labels=labels,
    )
    for worker in workers:
        for peer in worker.peers:
            names = [worker.name, peer.client.where]
            pushes.add_metric(names, peer.pushes_total)
            errors.add_metric(names, peer.errors_total)
    yield from (pushes, errors)

"""The notifier's metrics: each channel's deliveries, and the sender election's."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from lockwatch.notify.alertmanager import AlertmanagerWorker, alertmanager_metrics
from lockwatch.notify.election import Election


class ChannelCounts(Protocol):
    """What a channel's worker counts (``ChannelWorker``, ``AlertmanagerWorker``)."""

    @property
    def name(self) -> str: ...
    @property
    def pending(self) -> int: ...
    @property
    def sent_total(self) -> int: ...
    @property
    def failed_total(self) -> int: ...
    @property
    def errors_total(self) -> int: ...


class NotifierCollector(Collector):
    def __init__(
        self,
        workers: Sequence[ChannelCounts],
        election: Election | None,
        alertmanagers: Sequence[AlertmanagerWorker] = (),
    ) -> None:
        self._workers: tuple[ChannelCounts, ...] = (*workers, *alertmanagers)
        self._alertmanagers = alertmanagers
        self._election = election

    def collect(self) -> Iterator[Metric]:
        labels = ["channel"]
        sent = CounterMetricFamily(
            "lockwatch_notifications_sent_total", "Notifications delivered.", labels=labels
        )
        failed = CounterMetricFamily(
            "lockwatch_notifications_failed_total",
            "Notifications given up on: refused for good by the receiver, "
            "undeliverable for too long, or dropped from a full outbox.",
            labels=labels,
        )
        errors = CounterMetricFamily(
            "lockwatch_notification_errors_total",
            "Delivery attempts that failed and are retried.",
            labels=labels,
        )
        pending = GaugeMetricFamily(
            "lockwatch_notifications_pending",
            "Notifications waiting in the channel's outbox.",
            labels=labels,
        )
        for worker in self._workers:
            channel = [worker.name]
            sent.add_metric(channel, worker.sent_total)
            failed.add_metric(channel, worker.failed_total)
            errors.add_metric(channel, worker.errors_total)
            pending.add_metric(channel, worker.pending)
        yield from (sent, failed, errors, pending)
        if self._alertmanagers:
            yield from alertmanager_metrics(self._alertmanagers)
        if self._election is not None:
            yield from election_metrics(self._election)


def election_metrics(election: Election) -> Iterator[Metric]:
    labels = ["replica"]
    sender = GaugeMetricFamily(
        "lockwatch_notify_sender",
        "1 while this replica is the elected sender of notifications for its shard, "
        "0 while it stands by; scope is what the replicas elect a sender of "
        "(the shard, with notify.group), the same on every replica of it.",
        labels=["replica", "scope"],
    )
    sender.add_metric([election.replica, election.scope], 1.0 if election.sender else 0.0)
    changes = CounterMetricFamily(
        "lockwatch_notify_sender_changes_total",
        "Times this replica became, or stopped being, the sender.",
        labels=labels,
    )
    changes.add_metric([election.replica], election.changes_total)
    errors = CounterMetricFamily(
        "lockwatch_notify_store_errors_total",
        "Calls to the shared store (the sender's lease and the channels' state) that failed.",
        labels=labels,
    )
    errors.add_metric([election.replica], election.errors_total)
    yield from (sender, changes, errors)

"""This instance's part of the fleet: its shard, and the health of each target
source (``lockwatch_target_source_*``), from a :class:`FleetStatus` taken at
each scrape."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from lockwatch.model.discovery import FleetStatus
from lockwatch.text import printable


def gauge(name: str, documentation: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=labels)


def add(family: GaugeMetricFamily | CounterMetricFamily, labels: list[str], value: float) -> None:
    # A source's name comes from the config (a file path, a URL): made encodable.
    family.add_metric([printable(label) for label in labels], value)


def fleet_metrics(status: FleetStatus) -> Iterator[Metric]:
    info = gauge(
        "lockwatch_shard_info",
        "1, labelled with this instance's shard and the number of shards.",
        ["shard", "shards"],
    )
    add(info, [str(status.shard), str(status.shards)], 1)
    watched = gauge("lockwatch_shard_targets", "Targets this shard watches.", [])
    add(watched, [], status.watched)
    yield from (info, watched)
    labels = ["source", "kind"]
    up = gauge(
        "lockwatch_target_source_up",
        "1 if the last read of the target source succeeded; 0 while it fails (its last "
        "good list stays watched).",
        labels,
    )
    targets = gauge(
        "lockwatch_target_source_targets", "Targets made from the source's last good list.", labels
    )
    rejected = gauge(
        "lockwatch_target_source_rejected_entries",
        "Entries of the source's last good list that made no target (each is logged).",
        labels,
    )
    reads = CounterMetricFamily(
        "lockwatch_target_source_reads_total", "Reads of the target source.", labels=labels
    )
    errors = CounterMetricFamily(
        "lockwatch_target_source_errors_total",
        "Reads of the target source that failed.",
        labels=labels,
    )
    last = gauge(
        "lockwatch_target_source_last_success_timestamp_seconds",
        "Unix time of the last successful read of the source; absent until one succeeded.",
        labels,
    )
    for source in status.sources:
        key = [source.name, source.kind]
        add(up, key, 1 if source.up else 0)
        add(targets, key, source.targets)
        add(rejected, key, source.rejected)
        add(reads, key, source.reads_total)
        add(errors, key, source.errors_total)
        if source.last_success is not None:
            add(last, key, source.last_success.timestamp())
    yield from (up, targets, rejected, reads, errors, last)


class FleetCollector(Collector):
    def __init__(self, status: Callable[[], FleetStatus]) -> None:
        self._status = status

    def collect(self) -> Iterator[Metric]:
        yield from fleet_metrics(self._status())

"""lockwatch's own timeliness: how late polls start, for the whole process."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from lockwatch.state.lateness import Lateness


class LatenessCollector(Collector):
    """``lockwatch_poll_lateness_seconds``: per poll, how long after its due
    time a poller began it. Growing counts in the upper buckets mean the
    process cannot keep its schedule (too many targets, or hung polls)."""

    def __init__(self, lateness: Lateness) -> None:
        self._lateness = lateness

    def collect(self) -> Iterator[Metric]:
        counts = self._lateness.counts()
        buckets = [(repr(bound), float(polls)) for bound, polls in counts.cumulative]
        yield HistogramMetricFamily(
            "lockwatch_poll_lateness_seconds",
            "How long after its due time each poll started, over every target.",
            buckets=[*buckets, ("+Inf", float(counts.count))],
            sum_value=counts.total_seconds,
        )

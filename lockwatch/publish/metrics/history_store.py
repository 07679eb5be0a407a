"""Whether resolved incidents are being kept: ``lockwatch_history_store_up``
(0 while the incident history store cannot be written: they are then kept in
memory only, and lost at the next restart) and its errors."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from lockwatch.state.incident_history import IncidentHistory


class HistoryStoreCollector(Collector):
    def __init__(self, history: IncidentHistory) -> None:
        self._history = history

    def collect(self) -> Iterator[Metric]:
        labels = ["store"]
        up = GaugeMetricFamily(
            "lockwatch_history_store_up",
            "1 while the store of resolved incidents (the state dir's file, or the pings' "
            "PostgreSQL table) can be written; 0 while it cannot: they are kept in memory "
            "only, and lost at the next restart.",
            labels=labels,
        )
        up.add_metric([self._history.kind], 1.0 if self._history.up else 0.0)
        errors = CounterMetricFamily(
            "lockwatch_history_store_errors",
            "Writes and reads of the store of resolved incidents that failed.",
            labels=labels,
        )
        errors.add_metric([self._history.kind], float(self._history.errors_total))
        yield from (up, errors)

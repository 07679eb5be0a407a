"""Building metric families: every label value goes through ``printable``, so
whatever a client put in a name still gives valid exposition."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from lockwatch.text import printable


def gauge(name: str, documentation: str, labels: Iterable[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=list(labels))


def add(family: GaugeMetricFamily | CounterMetricFamily, labels: list[str], value: float) -> None:
    family.add_metric([printable(label) for label in labels], value)

"""lockwatch_poll_lateness_seconds, as Prometheus reads it."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from lockwatch.publish.metrics.lateness import LatenessCollector
from lockwatch.state.lateness import Lateness


def test_the_lateness_histogram_counts_each_poll_in_its_bucket_and_above() -> None:
    lateness = Lateness()
    for seconds in (-0.0001, 0.0005, 0.02, 0.2, 30.0):
        lateness.observe(seconds)
    registry = CollectorRegistry()
    registry.register(LatenessCollector(lateness))

    def bucket(le: str) -> float | None:
        return registry.get_sample_value("lockwatch_poll_lateness_seconds_bucket", {"le": le})

    assert bucket("0.001") == 2.0, "a poll started a hair early counts as on time"
    assert bucket("0.025") == 3.0
    assert bucket("0.25") == 4.0
    assert bucket("10.0") == 4.0
    assert bucket("+Inf") == 5.0
    assert registry.get_sample_value("lockwatch_poll_lateness_seconds_count") == 5.0
    total = registry.get_sample_value("lockwatch_poll_lateness_seconds_sum")
    assert total is not None and abs(total - 30.2205) < 1e-9

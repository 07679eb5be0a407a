"""``lockwatch_shard_*`` and ``lockwatch_target_source_*`` from a FleetStatus."""

from __future__ import annotations

from datetime import UTC, datetime

from prometheus_client import CollectorRegistry

from lockwatch.model.discovery import FleetStatus, SourceHealth
from lockwatch.publish.metrics.fleet import FleetCollector

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def registry_of(status: FleetStatus) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(FleetCollector(lambda: status))
    return registry


def test_the_shard_and_each_source_s_health_are_exported() -> None:
    good = SourceHealth("clusters", "file", True, 12, 1, 5, 0, NOW, None)
    failing = SourceHealth("inventory", "http", False, 7, 0, 9, 4, None, "HTTP 500")
    registry = registry_of(FleetStatus(1, 3, 19, (good, failing)))

    assert registry.get_sample_value("lockwatch_shard_info", {"shard": "1", "shards": "3"}) == 1
    assert registry.get_sample_value("lockwatch_shard_targets") == 19
    clusters = {"source": "clusters", "kind": "file"}
    inventory = {"source": "inventory", "kind": "http"}
    assert registry.get_sample_value("lockwatch_target_source_up", clusters) == 1
    assert registry.get_sample_value("lockwatch_target_source_up", inventory) == 0
    assert registry.get_sample_value("lockwatch_target_source_targets", inventory) == 7
    assert registry.get_sample_value("lockwatch_target_source_rejected_entries", clusters) == 1
    assert registry.get_sample_value("lockwatch_target_source_errors_total", inventory) == 4
    assert registry.get_sample_value("lockwatch_target_source_reads_total", inventory) == 9
    assert (
        registry.get_sample_value(
            "lockwatch_target_source_last_success_timestamp_seconds", clusters
        )
        == NOW.timestamp()
    )
    assert (
        registry.get_sample_value(
            "lockwatch_target_source_last_success_timestamp_seconds", inventory
        )
        is None
    )


def test_an_instance_without_sources_still_says_its_shard() -> None:
    registry = registry_of(FleetStatus(0, 1, 2))

    assert registry.get_sample_value("lockwatch_shard_info", {"shard": "0", "shards": "1"}) == 1
    assert registry.get_sample_value("lockwatch_shard_targets") == 2

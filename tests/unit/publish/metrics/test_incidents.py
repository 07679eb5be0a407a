"""Open incidents as metrics: counts per severity, one bounded series per
incident with its root's labels, and the numbers alert descriptions quote."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client.parser import text_string_to_metric_families

from lockwatch.model.findings import Severity
from lockwatch.model.incident_text import ROOT_LABELS
from lockwatch.model.incidents import Incident
from lockwatch.publish.metrics.incidents import INCIDENT_SERIES_CAP
from lockwatch.state.target_view import TargetView
from tests.fixtures.incident_values import incident, session_root
from tests.fixtures.metrics import exposition, metrics_of
from tests.fixtures.notify import finding
from tests.fixtures.snapshots import TARGET, held, snapshot
from tests.unit.publish.metrics.test_registry import polled, registry_of, series

HOSTILE_APP = 'w"orker\n{x="1"} \\ ' + "y" * 300


def with_incidents(*incidents: Incident) -> TargetView:
    view = polled(snapshot(held(42, 1234)))
    return replace(view, incidents=incidents)


def test_open_incidents_are_counted_per_severity_with_every_severity_present() -> None:
    registry = registry_of(
        with_incidents(incident(id="a"), incident([finding()], id="b", severity=Severity.WARNING))
    )
    for severity, expected in (("critical", 1), ("warning", 1), ("info", 0)):
        value = registry.get_sample_value(
            "lockwatch_incidents", {"target": TARGET, "severity": severity}
        )
        assert value == expected


def test_each_open_incident_is_one_series_with_its_roots_labels() -> None:
    registry = registry_of(with_incidents(incident()))
    (labels,) = series(registry, "lockwatch_incident_active")
    assert labels == {
        "target": TARGET,
        "incident": "inc-1",
        "fingerprint": session_root().fingerprint,
        "root": "session",
        "kind": "lock_convoy",
        "severity": "critical",
        "database": "app",
        "lock": "42",
        "queue": "",
        "job_name": "",
        "source": "",
        "pid": "1234",
        "application": "webhook-worker-1",
        "holder": "pid 1234 · webhook-worker-1 · 10.0.0.5",
        "blocking_query": "SELECT pg_advisory_lock(?)",
    }
    assert set(labels) == {"target", *ROOT_LABELS}


def test_the_numbers_an_alert_quotes_are_series_beside_the_incident() -> None:
    registry = registry_of(with_incidents(incident()))
    one = {"target": TARGET, "incident": "inc-1"}
    assert registry.get_sample_value("lockwatch_incident_hold_seconds", one) == 340.0
    assert registry.get_sample_value("lockwatch_incident_holder_idle_seconds", one) == 330.0
    assert registry.get_sample_value("lockwatch_incident_waiters", one) == 5
    assert registry.get_sample_value("lockwatch_incident_waiter_seconds", one) == 1500.0
    assert registry.get_sample_value("lockwatch_incident_locks_held", one) == 1


def test_incident_series_are_capped_per_target_and_the_rest_counted() -> None:
    many = [incident([finding()], id=f"i{n}") for n in range(INCIDENT_SERIES_CAP + 7)]
    registry = registry_of(with_incidents(*many))
    assert len(series(registry, "lockwatch_incident_active")) == INCIDENT_SERIES_CAP
    dropped = registry.get_sample_value("lockwatch_incident_series_dropped", {"target": TARGET})
    assert dropped == 7
    total = registry.get_sample_value(
        "lockwatch_incidents", {"target": TARGET, "severity": "warning"}
    )
    assert total == INCIDENT_SERIES_CAP + 7


def test_incidents_past_the_series_cap_are_counted_by_severity_for_their_alert() -> None:
    worst = [
        incident(id=f"c{n}", severity=Severity.CRITICAL) for n in range(INCIDENT_SERIES_CAP + 3)
    ]
    rest = [incident([finding()], id=f"w{n}", severity=Severity.WARNING) for n in range(4)]
    registry = registry_of(with_incidents(*worst, *rest))

    def past(severity: str) -> float | None:
        labels = {"target": TARGET, "severity": severity}
        return registry.get_sample_value("lockwatch_incidents_past_series_cap", labels)

    assert (past("critical"), past("warning"), past("info")) == (3, 4, None)
    few = registry_of(with_incidents(*rest))
    assert series(few, "lockwatch_incidents_past_series_cap") == []


def test_a_hostile_application_name_is_one_bounded_label_that_still_parses() -> None:
    root = session_root(app=HOSTILE_APP)
    text = exposition(metrics_of(with_incidents(incident(root=root))))
    parsed = [
        sample.labels["application"]
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "lockwatch_incident_active"
    ]
    (application,) = parsed
    assert "\n" not in application and len(application) <= 81
    assert application.startswith('w"orker {x="1"}')


def test_without_incidents_only_the_zero_counts_are_there() -> None:
    registry = registry_of(with_incidents())
    assert series(registry, "lockwatch_incident_active") == []
    assert (
        registry.get_sample_value("lockwatch_incidents", {"target": TARGET, "severity": "critical"})
        == 0
    )

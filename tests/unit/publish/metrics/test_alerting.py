"""The metrics alerting reads: lockwatch_finding_info for the bundled rules, and
the notifier's own counters."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from lockwatch.model.findings import Finding
from lockwatch.model.views import TargetStatus
from lockwatch.notify.service import AlertNotifier
from lockwatch.publish.metrics.registry import FINDING_SERIES_CAP, SUBJECT_LABELS
from lockwatch.settings.notify import NotifySettings, SlackChannel, WebhookChannel
from lockwatch.settings.targets import Target
from lockwatch.state.target_view import TargetView
from tests.fixtures.metrics import metrics_of, scraped
from tests.fixtures.notify import HOLDER_PID, convoy, finding
from tests.fixtures.snapshots import NOW, TARGET, held_by, snapshot


def registry_of(findings: list[Finding]) -> CollectorRegistry:
    """/metrics of a target with these findings, as prometheus_client's parser reads it."""
    view = TargetView(
        target=Target(TARGET, "host=db"),
        status=TargetStatus(TARGET, NOW, snapshot()),
        findings=tuple(findings),
    )
    return scraped(metrics_of(view))


def samples(registry: CollectorRegistry, name: str) -> list[dict[str, str]]:
    return [
        sample.labels
        for family in registry.collect()
        for sample in family.samples
        if sample.name == name
    ]


def test_finding_info_carries_each_findings_severity_and_holder() -> None:
    registry = registry_of(convoy())
    subject = {
        **dict.fromkeys(SUBJECT_LABELS, ""),
        "database": "app",
        "lock": held_by(HOLDER_PID).lock or "",
    }
    holder = f"pid {HOLDER_PID} (webhook-worker-1 from 10.0.0.5)"
    for kind in ("lock_convoy", "lock_held_too_long"):
        labels = {"target": TARGET, "kind": kind, **subject}
        assert registry.get_sample_value("lockwatch_finding_active", labels) == 1
        info = {**labels, "severity": "critical", "holder": holder}
        assert registry.get_sample_value("lockwatch_finding_info", info) == 1


def test_a_finding_without_a_holder_has_an_empty_holder_label() -> None:
    (info,) = samples(registry_of([finding()]), "lockwatch_finding_info")
    assert (info["kind"], info["severity"], info.get("holder", "")) == (
        "lock_orphaned",
        "warning",
        "",
    )


def test_a_hostile_holder_name_stays_one_short_line() -> None:
    hostile = 'evil"} 1\nlockwatch_up{target="x"} 1 ' + "x" * 10_000
    holders = [
        info["holder"]
        for info in samples(registry_of(convoy(app=hostile)), "lockwatch_finding_info")
    ]
    assert len(holders) == 2
    for holder in holders:
        assert "\n" not in holder and len(holder) < 120
        assert holder.startswith(f'pid {HOLDER_PID} (evil"}} 1 lockwatch_up{{target="x"}} 1 x')


def test_finding_info_is_capped_with_finding_active() -> None:
    findings = [finding(lock=str(n), lasted=n) for n in range(FINDING_SERIES_CAP + 5)]
    registry = registry_of(findings)
    assert len(samples(registry, "lockwatch_finding_info")) == FINDING_SERIES_CAP
    assert len(samples(registry, "lockwatch_finding_active")) == FINDING_SERIES_CAP


def test_the_notifier_exports_its_counters_per_channel() -> None:
    settings = NotifySettings(
        channels=(SlackChannel("team", "https://h/s/x"), WebhookChannel("hook", "https://h/y"))
    )
    registry = CollectorRegistry()
    registry.register(AlertNotifier(settings, None).collector())
    for name in (
        "lockwatch_notifications_sent_total",
        "lockwatch_notifications_failed_total",
        "lockwatch_notification_errors_total",
        "lockwatch_notifications_pending",
    ):
        for channel in ("team", "hook"):
            assert registry.get_sample_value(name, {"channel": channel}) == 0, name

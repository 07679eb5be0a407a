from __future__ import annotations

import platform
from dataclasses import replace
from datetime import timedelta

from hypothesis import given, settings
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

import lockwatch
from lockwatch.model.findings import Finding, FindingKind, Severity, Subject
from lockwatch.model.locks import LockKey, LockSnapshot, SessionVisibility
from lockwatch.model.views import TargetStatus
from lockwatch.publish.metrics.registry import FINDING_SERIES_CAP, SUBJECT_LABELS, Metrics
from lockwatch.settings.locks import LockSettings, NamedLock
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.target_view import TargetView
from tests.fixtures.evidence import lock_evidence
from tests.fixtures.metrics import exposition, metrics_of, scraped
from tests.fixtures.snapshots import (
    NOW,
    TARGET,
    ago,
    backend,
    held,
    lock_snapshots,
    snapshot,
    waiting,
)

LOCK_SERIES = (
    "lockwatch_advisory_lock_hold_seconds",
    "lockwatch_advisory_lock_waiters",
    "lockwatch_advisory_lock_longest_wait_seconds",
)


def target(locks: LockSettings | None = None, name: str = TARGET) -> Target:
    return Target(
        name=name, dsn="postgresql://mon:s3cret@127.0.0.1:6432/app", locks=locks or LockSettings()
    )


def polled(
    snap: LockSnapshot,
    locks: LockSettings | None = None,
    findings: tuple[Finding, ...] = (),
    name: str = TARGET,
) -> TargetView:
    return TargetView(
        target=target(locks, name),
        status=TargetStatus(target=name, checked_at=NOW, snapshot=snap),
        polls_total=7,
        poll_errors_total=2,
        last_success=NOW,
        findings=findings,
    )


def registry_of(*views: TargetView, detail: bool = False) -> CollectorRegistry:
    """/metrics of a board with these views, as prometheus_client's parser reads
    it (``detail``: as ``?detail=full`` asks)."""
    return scraped(metrics_of(*views), detail=detail)


def series(registry: CollectorRegistry, name: str) -> list[dict[str, str]]:
    return [
        sample.labels
        for metric in registry.collect()
        for sample in metric.samples
        if sample.name == name
    ]


def lock_labels(lock: str, database: str = "app") -> dict[str, str]:
    return {"target": TARGET, "database": database, "lock": lock}


def finding(
    kind: FindingKind = FindingKind.LOCK_HELD_TOO_LONG,
    severity: Severity = Severity.WARNING,
    lock: str = "42",
    age: float = 60.0,
) -> Finding:
    return Finding(
        kind=kind,
        target=TARGET,
        subject=Subject(database="app", lock=lock),
        severity=severity,
        since=ago(age),
        summary=f"lock {lock} held too long",
        evidence=lock_evidence(lock),
    )


def test_it_reports_a_polled_target_up_with_its_poll_totals() -> None:
    registry = registry_of(polled(replace(snapshot(), poll_seconds=0.25)))
    labels = {"target": TARGET}

    assert registry.get_sample_value("lockwatch_up", labels) == 1
    assert registry.get_sample_value("lockwatch_last_poll_duration_seconds", labels) == 0.25
    assert registry.get_sample_value("lockwatch_polls_total", labels) == 7
    assert registry.get_sample_value("lockwatch_poll_errors_total", labels) == 2
    assert (
        registry.get_sample_value("lockwatch_last_successful_poll_timestamp_seconds", labels)
        == NOW.timestamp()
    )


def test_it_reports_a_target_down_when_its_last_poll_failed_and_claims_nothing_about_its_locks() -> (
    None
):
    locks = LockSettings(named=(NamedLock("leader", LockKey.bigint(1)),))
    view = replace(
        polled(snapshot(), locks),
        status=TargetStatus(TARGET, NOW, None, error="connection refused", failing_since=ago(30)),
    )
    registry = registry_of(view)

    assert registry.get_sample_value("lockwatch_up", {"target": TARGET}) == 0
    assert series(registry, "lockwatch_last_poll_duration_seconds") == []
    assert series(registry, "lockwatch_advisory_lock_hold_seconds") == []


def test_it_reports_a_registered_target_down_before_its_first_poll() -> None:
    board = Board()
    board.register(target())
    registry = scraped(Metrics(board, clock=lambda: NOW))

    assert registry.get_sample_value("lockwatch_up", {"target": TARGET}) == 0
    assert registry.get_sample_value("lockwatch_polls_total", {"target": TARGET}) == 0
    assert series(registry, "lockwatch_last_successful_poll_timestamp_seconds") == []


def test_it_exports_the_build_info() -> None:
    registry = registry_of()

    labels = {"version": lockwatch.__version__, "python_version": platform.python_version()}
    assert registry.get_sample_value("lockwatch_build_info", labels) == 1


def test_it_exports_a_named_lock_that_nobody_holds_as_zero() -> None:
    locks = LockSettings(
        named=(
            NamedLock("nightly-leader", LockKey.bigint(1)),
            NamedLock("billing", LockKey.int_pair(7, 13), database="billing"),
        )
    )
    registry = registry_of(polled(snapshot(), locks))

    for labels in (lock_labels("nightly-leader", ""), lock_labels("billing", "billing")):
        for name in LOCK_SERIES:
            assert registry.get_sample_value(name, labels) == 0, (name, labels)


def test_it_measures_holds_from_first_sight_and_waits_from_wait_start() -> None:
    locks = LockSettings(named=(NamedLock("webhooks", LockKey.bigint(42)),))
    snap = snapshot(
        held(42, 1234, held_for=340),
        waiting(42, 1301, waited_for=310),
        waiting(42, 1302, waited_for=20),
        waiting(42, 1303, waited_for=5, wait_start_known=False),
    )
    registry = registry_of(polled(snap, locks))
    labels = lock_labels("webhooks")

    assert registry.get_sample_value("lockwatch_advisory_lock_hold_seconds", labels) == 340
    assert registry.get_sample_value("lockwatch_advisory_lock_waiters", labels) == 3
    assert registry.get_sample_value("lockwatch_advisory_lock_longest_wait_seconds", labels) == 310
    counts = {"target": TARGET, "database": "app"}
    assert registry.get_sample_value("lockwatch_advisory_locks", {**counts, "state": "held"}) == 1
    assert (
        registry.get_sample_value("lockwatch_advisory_locks", {**counts, "state": "waiting"}) == 3
    )


def test_it_keeps_the_hold_time_growing_between_polls() -> None:
    board = Board()
    board.publish(polled(snapshot(held((7, 13), 1234, held_for=100))))
    registry = scraped(Metrics(board, clock=lambda: NOW + timedelta(seconds=15)))

    assert (
        registry.get_sample_value("lockwatch_advisory_lock_hold_seconds", lock_labels("7,13"))
        == 115
    )


def test_it_exports_only_the_top_n_longest_held_unnamed_locks_besides_the_named_ones() -> None:
    locks = LockSettings(
        top_n=5,
        named=(NamedLock("leader", LockKey.bigint(1)), NamedLock("idle", LockKey.bigint(2))),
    )
    unnamed = [held(1000 + n, 2000 + n, held_for=n) for n in range(50)]
    registry = registry_of(polled(snapshot(held(1, 10, held_for=1), *unnamed), locks), detail=True)

    exported = {
        labels["lock"] for labels in series(registry, "lockwatch_advisory_lock_hold_seconds")
    }
    assert exported == {"leader", "idle", "1049", "1048", "1047", "1046", "1045"}
    for name in LOCK_SERIES:
        assert len(series(registry, name)) == 7, name
    counts = {"target": TARGET, "database": "app", "state": "held"}
    assert registry.get_sample_value("lockwatch_advisory_locks", counts) == 51


def test_a_quiet_target_exports_its_named_locks_and_its_longest_held_key_only() -> None:
    locks = LockSettings(
        top_n=5,
        named=(NamedLock("leader", LockKey.bigint(1)), NamedLock("idle", LockKey.bigint(2))),
    )
    unnamed = [held(1000 + n, 2000 + n, held_for=n) for n in range(50)]
    registry = registry_of(polled(snapshot(held(1, 10, held_for=1), *unnamed), locks))

    holds = series(registry, "lockwatch_advisory_lock_hold_seconds")
    assert {labels["lock"] for labels in holds} == {"leader", "idle", "1049"}
    assert registry.get_sample_value("lockwatch_advisory_lock_hold_seconds", lock_labels("1049"))
    for name in LOCK_SERIES[1:]:  # nobody waits: the named locks' zeros stay, the key's go
        assert {labels["lock"] for labels in series(registry, name)} == {"leader", "idle"}
    assert series(registry, "lockwatch_findings") == []
    assert series(registry, "lockwatch_finding_series_dropped") == []
    counts = {"target": TARGET, "database": "app", "state": "held"}
    assert registry.get_sample_value("lockwatch_advisory_locks", counts) == 51


def test_scrape_after_scrape_a_quiet_target_exports_the_locks_of_its_last_poll() -> None:
    board = Board()
    metrics = Metrics(board, clock=lambda: NOW)

    def longest_held(*, detail: bool = False) -> set[str]:
        registry = scraped(metrics, detail=detail)
        return {s["lock"] for s in series(registry, "lockwatch_advisory_lock_hold_seconds")}

    board.publish(polled(snapshot(held(1, 10, held_for=5), held(2, 11, held_for=9))))
    assert longest_held() == {"2"}
    assert longest_held() == {"2"}
    assert longest_held(detail=True) == {"1", "2"}
    board.publish(polled(snapshot(held(1, 10, held_for=5), held(3, 12, held_for=60))))
    assert longest_held() == {"3"}
    # Somebody waits: not quiet, every top_n key.
    waited = snapshot(held(1, 10, held_for=5), waiting(1, 13, waited_for=1))
    board.publish(polled(waited))
    assert longest_held() == {"1"}
    # Quiet again, with new locks.
    board.publish(polled(snapshot(held(4, 14, held_for=1), held(1, 10, held_for=5))))
    assert longest_held() == {"1"}


def test_a_target_with_a_finding_or_a_waiter_exports_its_top_n_without_detail() -> None:
    locks = LockSettings(top_n=3)
    unnamed = [held(1000 + n, 2000 + n, held_for=n) for n in range(10)]
    with_finding = polled(snapshot(*unnamed), locks, findings=(finding(lock="1009"),))
    with_waiter = polled(snapshot(*unnamed, waiting(1000, 3000, waited_for=5)), locks, name="other")
    registry = registry_of(with_finding, with_waiter)

    for name in LOCK_SERIES:
        exported = sorted((s["target"], s["lock"]) for s in series(registry, name))
        assert exported == [
            (target, key) for target in (TARGET, "other") for key in ("1007", "1008", "1009")
        ], name
    # Of the findings, the combinations with some: the zeros are detail.
    assert series(registry, "lockwatch_findings") == [
        {"target": TARGET, "kind": "lock_held_too_long", "severity": "warning"}
    ]


def test_it_never_exports_ignored_keys() -> None:
    locks = LockSettings(
        ignore=(LockKey.bigint(99),),
        named=(NamedLock("good_job liveness", LockKey.bigint(77), ignore=True),),
    )
    snap = snapshot(
        held(99, 10, held_for=9000),
        held(77, 11, held_for=9000),
        waiting(77, 12, waited_for=60),
        held(5, 13, held_for=1),
    )
    registry = registry_of(polled(snap, locks), detail=True)

    for name in LOCK_SERIES:
        assert [labels["lock"] for labels in series(registry, name)] == ["5"], name
    counts = {"target": TARGET, "database": "app"}
    assert registry.get_sample_value("lockwatch_advisory_locks", {**counts, "state": "held"}) == 1
    assert (
        registry.get_sample_value("lockwatch_advisory_locks", {**counts, "state": "waiting"}) == 0
    )


def test_with_detail_it_exports_every_finding_kind_and_severity_even_when_none_is_active() -> None:
    registry = registry_of(
        polled(snapshot(), findings=(finding(severity=Severity.CRITICAL),)), detail=True
    )

    assert len(series(registry, "lockwatch_findings")) == len(FindingKind) * len(Severity)
    base = {"target": TARGET, "kind": "lock_held_too_long"}
    assert registry.get_sample_value("lockwatch_findings", {**base, "severity": "critical"}) == 1
    assert registry.get_sample_value("lockwatch_findings", {**base, "severity": "warning"}) == 0
    assert (
        registry.get_sample_value(
            "lockwatch_findings",
            {"target": TARGET, "kind": "leader_lock_missing", "severity": "info"},
        )
        == 0
    )
    active = {
        "target": TARGET,
        "kind": "lock_held_too_long",
        **dict.fromkeys(SUBJECT_LABELS, ""),
        "database": "app",
        "lock": "42",
    }
    assert registry.get_sample_value("lockwatch_finding_active", active) == 1
    assert registry.get_sample_value("lockwatch_finding_series_dropped", {"target": TARGET}) == 0


def test_it_caps_active_finding_series_per_target_and_counts_the_dropped_ones() -> None:
    findings = tuple(finding(lock=str(n), age=n) for n in range(FINDING_SERIES_CAP + 30))
    registry = registry_of(polled(snapshot(), findings=findings))

    assert len(series(registry, "lockwatch_finding_active")) == FINDING_SERIES_CAP
    assert registry.get_sample_value("lockwatch_finding_series_dropped", {"target": TARGET}) == 30
    labels = {"target": TARGET, "kind": "lock_held_too_long", "severity": "warning"}
    assert registry.get_sample_value("lockwatch_findings", labels) == FINDING_SERIES_CAP + 30


def test_hostile_database_and_application_names_still_give_valid_exposition() -> None:
    hostile_db = 'pay"ments\\\n}\udcff'
    snap = snapshot(
        held(42, 1234, held_for=30, database=hostile_db),
        backends=[backend(1234, 'evil"} 1\nlockwatch_up{target="x"} 1', query="DROP\udcfe")],
    )
    text = exposition(metrics_of(polled(snap), polled(snapshot(), name='ta"rget\n')))

    families = {f.name: f for f in text_string_to_metric_families(text)}
    holds = families["lockwatch_advisory_lock_hold_seconds"].samples
    assert [s.labels["database"] for s in holds] == ['pay"ments\\\n}\\udcff']
    assert {s.labels["target"] for s in families["lockwatch_up"].samples} == {TARGET, 'ta"rget\n'}
    assert "evil" not in text
    assert "DROP" not in text


@settings(max_examples=50, deadline=None)
@given(lock_snapshots())
def test_no_client_value_becomes_a_label_and_series_stay_bounded(snap: LockSnapshot) -> None:
    locks = LockSettings(top_n=2, named=(NamedLock("leader", LockKey.bigint(1)),))
    registry = registry_of(polled(snap, locks))  # parsed: the exposition is valid

    hold_series = series(registry, "lockwatch_advisory_lock_hold_seconds")
    assert len(hold_series) <= 2 + 2  # the named lock in up to two databases, plus top_n
    allowed = {
        "target",
        "database",
        "lock",
        "state",
        "kind",
        "severity",
        "version",
        "python_version",
        "reason",  # why poll slots were skipped: two fixed values
    }
    for metric in registry.collect():
        for sample in metric.samples:
            assert set(sample.labels) <= allowed
            assert sample.labels.get("database", "app") in {"app", "other", ""}


def test_it_says_whether_the_role_can_see_every_session_once_a_poll_said() -> None:
    for sees, value in ((True, 1.0), (False, 0.0)):
        visibility = SessionVisibility("lockwatch", sees_all_sessions=sees)
        registry = registry_of(polled(replace(snapshot(), visibility=visibility)))
        labels = {"target": TARGET}
        assert registry.get_sample_value("lockwatch_target_can_see_sessions", labels) == value
    assert series(registry_of(polled(snapshot())), "lockwatch_target_can_see_sessions") == []


def test_it_exports_the_server_time_of_a_poll_only_where_it_is_known() -> None:
    known = polled(replace(snapshot(), server_seconds=0.0125))
    unknown = polled(snapshot(), name="other")
    registry = registry_of(known, unknown)

    assert series(registry, "lockwatch_poll_server_seconds") == [{"target": TARGET}]
    assert registry.get_sample_value("lockwatch_poll_server_seconds", {"target": TARGET}) == 0.0125


def test_it_exports_the_pace_of_the_polls_and_the_slots_left_out() -> None:
    slowed = replace(polled(snapshot()), poll_interval=4.0, slots_skipped={"contended": 6})
    registry = registry_of(slowed)

    assert registry.get_sample_value("lockwatch_poll_interval_seconds", {"target": TARGET}) == 4.0
    skipped = "lockwatch_poll_slots_skipped_total"
    assert registry.get_sample_value(skipped, {"target": TARGET, "reason": "contended"}) == 6
    assert registry.get_sample_value(skipped, {"target": TARGET, "reason": "overran"}) == 0

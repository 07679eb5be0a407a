"""A source's schedule and failures: each on its own, logged once, backed off,
reported as a target_down naming the source; and the queue metrics and API
built from what the sources left on the board."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

import pytest
from prometheus_client import CollectorRegistry

from lockwatch.detect.sources import detect_source_down
from lockwatch.model.evidence import SourceDownEvidence
from lockwatch.model.findings import Finding, FindingKind, Severity, Subject
from lockwatch.model.queues import QueueSample, QueueView, SessionWait, WorkerSample, WorkerView
from lockwatch.model.views import SourceHealth
from lockwatch.monitors.base import MonitorResult, PollContext, Sampled, Stateless
from lockwatch.publish.api.queues import queues_document
from lockwatch.runner import TargetRunner
from lockwatch.sample.base import SampleContext, SampleError, SourceRunner, TargetUnavailableError
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from lockwatch.state.target_view import TargetView
from tests.fixtures.evidence import evidence_as, evidence_of
from tests.fixtures.metrics import metrics_of, scraped
from tests.fixtures.postgres import free_port
from tests.fixtures.snapshots import NOW, TARGET, ago


@dataclass
class Scripted:
    """A source that answers from a script: a value, or an exception to raise."""

    script: list[object]
    calls: int = 0

    def sample(self, context: SampleContext) -> object:
        self.calls += 1
        answer = self.script.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def close(self) -> None:
        """Holds nothing."""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def runner(
    script: list[object], interval: float | None = None
) -> tuple[SourceRunner[object], Scripted, Clock]:
    source, clock = Scripted(script), Clock()
    return (
        SourceRunner(TARGET, "queue/webhooks", source, interval, 10.0, clock, lambda: 0.5),
        source,
        clock,
    )


def context(seconds_later: float = 0.0) -> SampleContext:
    return SampleContext(NOW + timedelta(seconds=seconds_later), None)


def test_a_failing_source_is_logged_once_counted_and_logged_again_when_it_recovers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sampled, _, clock = runner([SampleError("boom"), SampleError("boom again"), 7])
    caplog.set_level(logging.INFO, logger="lockwatch.sample.base")

    assert sampled.poll(context()) is None
    clock.now += 10
    assert sampled.poll(context(10)) is None
    failing = sampled.health
    clock.now += 100
    assert sampled.poll(context(110)) == 7

    assert (failing.up, failing.errors_total, failing.failing_since) == (False, 2, NOW)
    assert failing.error == "boom again"
    assert sampled.health.up and sampled.health.failing_since is None
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "main: queue/webhooks cannot be sampled: boom",
        "main: queue/webhooks is sampled again",
    ]


def test_a_failing_source_backs_off_so_a_hanging_server_costs_a_poll_now_and_then() -> None:
    sampled, source, clock = runner([SampleError("timeout")] * 5)

    for _ in range(8):
        sampled.poll(context())
        clock.now += 10  # the target's polls, every 10 s

    # retried at the next poll, then after 20 s, 40 s ...
    assert source.calls == 4


def test_a_source_on_its_own_interval_is_sampled_only_when_due() -> None:
    sampled, _, clock = runner([1, 2], interval=30.0)

    readings = []
    for _ in range(4):
        readings.append(sampled.poll(context()))
        clock.now += 10

    assert readings == [1, None, None, 2]


def test_a_source_waiting_for_its_target_is_not_failing_on_its_own() -> None:
    sampled, _, _ = runner([TargetUnavailableError("the target's database is down")])

    assert sampled.poll(context()) is None

    assert not sampled.health.up
    assert sampled.health.failing_since is None
    assert detect_source_down(TARGET, [sampled.health], NOW) == []


def test_a_source_failing_on_its_own_is_a_target_down_about_that_source() -> None:
    health = SourceHealth("queue/webhooks").failed(ago(30), "queue webhooks: relation gone")

    (finding,) = detect_source_down(TARGET, [health], NOW)

    assert finding.kind is FindingKind.TARGET_DOWN
    assert finding.subject == Subject(source="queue/webhooks")
    assert finding.subject.as_dict() == {
        "database": None,
        "lock": None,
        "queue": None,
        "job": None,
        "source": "queue/webhooks",
    }
    assert finding.since == ago(30)
    assert finding.summary == (
        "queue/webhooks of target main cannot be sampled: queue webhooks: relation gone"
    )
    assert evidence_as(finding, SourceDownEvidence).down_seconds == 30.0


def polled_view() -> TargetView:
    return TargetView(
        Target(TARGET, "postgresql://mon@127.0.0.1/app"),
        sources=(
            SourceHealth("queue/webhooks").succeeded(NOW),
            SourceHealth("workers/webhook-workers").failed(NOW, "gone"),
        ),
        queues=(
            QueueView(
                "webhooks",
                "queue/webhooks",
                60.0,
                QueueSample(NOW, 120, oldest_age_seconds=300.5, completed_total=77, in_flight=1),
                0.5,
                ("webhook-workers",),
            ),
            QueueView("never-sampled", "queue/never-sampled", 60.0),
        ),
        workers=(
            WorkerView(
                "webhook-workers",
                ("webhooks",),
                60.0,
                WorkerSample(NOW, 12.5, 6),
                0.01,
                {"active": 0, "waiting_lock": 5, "idle": 1, "idle_in_transaction": 0, "other": 0},
                (SessionWait("app", "webhook-delivery", "42", 5),),
            ),
        ),
    )


def registry_of(view: TargetView) -> CollectorRegistry:
    return scraped(metrics_of(view))


def test_queues_workers_and_sources_are_exported_with_labels_from_the_config() -> None:
    registry = registry_of(polled_view())

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"target": TARGET, **labels})

    assert value("lockwatch_queue_depth", queue="webhooks") == 120
    assert value("lockwatch_queue_oldest_age_seconds", queue="webhooks") == 300.5
    assert value("lockwatch_queue_in_flight", queue="webhooks") == 1
    assert value("lockwatch_queue_growth_per_second", queue="webhooks") == 0.5
    assert value("lockwatch_queue_completed_total", queue="webhooks") == 77
    assert value("lockwatch_queue_depth", queue="never-sampled") is None
    group = {"group": "webhook-workers"}
    assert value("lockwatch_worker_cpu_seconds_total", **group) == 12.5
    assert value("lockwatch_worker_processes", **group) == 6
    assert value("lockwatch_worker_cpu_cores", **group) == 0.01
    assert value("lockwatch_worker_sessions", **group, state="waiting_lock") == 5
    assert value("lockwatch_worker_sessions", **group, state="idle_in_transaction") == 0
    assert (
        value(
            "lockwatch_worker_sessions_waiting_on_lock",
            **group,
            database="app",
            lock="webhook-delivery",
        )
        == 5
    )
    assert value("lockwatch_source_up", source="queue/webhooks") == 1
    assert value("lockwatch_source_up", source="workers/webhook-workers") == 0
    assert value("lockwatch_source_errors_total", source="workers/webhook-workers") == 1


def test_the_queues_document_shows_queues_workers_and_sources() -> None:
    document = queues_document([polled_view()])

    (target,) = document["targets"]
    webhooks = target["queues"][0]
    assert webhooks["depth"] == 120
    assert webhooks["sampled_at"] == "2025-03-14T21:40:00Z"
    assert target["queues"][1]["depth"] is None
    (group,) = target["workers"]
    assert group["waiting_on"] == [
        {"database": "app", "lock": "webhook-delivery", "key": "42", "sessions": 5}
    ]
    assert group["sessions"]["waiting_lock"] == 5
    assert [(s["name"], s["up"], s["error"]) for s in target["sources"]] == [
        ("queue/webhooks", True, None),
        ("workers/webhook-workers", False, "gone"),
    ]


def test_findings_about_two_queues_are_two_series_of_finding_active() -> None:
    findings = tuple(
        Finding(
            FindingKind.QUEUE_STALLED,
            TARGET,
            Subject(queue=q),
            Severity.CRITICAL,
            NOW,
            q,
            evidence_of(FindingKind.QUEUE_STALLED, Subject(queue=q)),
        )
        for q in ("webhooks", "mail")
    )
    view = TargetView(Target(TARGET, "postgresql://mon@127.0.0.1/app"), findings=findings)

    registry = registry_of(view)

    for queue in ("webhooks", "mail"):
        labels = {"target": TARGET, "kind": "queue_stalled", "database": "", "lock": ""}
        labels |= {"queue": queue, "job_name": "", "source": ""}
        assert registry.get_sample_value("lockwatch_finding_active", labels) == 1


class Exploding(Stateless):
    """A monitor with a bug."""

    kinds: frozenset[FindingKind] = frozenset({FindingKind.QUEUE_STALLED})

    def sample(self, context: PollContext) -> Sampled:
        raise RuntimeError("bug")

    def judge(self, context: PollContext) -> MonitorResult:
        raise RuntimeError("bug")

    def publish(self, view: TargetView) -> TargetView:
        return view

    def close(self) -> None:
        """Holds nothing."""


def test_a_monitor_that_breaks_is_logged_and_costs_the_target_nothing_else(
    caplog: pytest.LogCaptureFixture,
) -> None:
    target = Target(TARGET, f"postgresql://nobody@127.0.0.1:{free_port()}/app", connect_timeout=1.0)
    runner = TargetRunner(target, Board(), StateStore(None))
    runner.monitors = (*runner.monitors, Exploding())

    view = runner.poll_once()

    assert [f.kind for f in view.findings] == [FindingKind.TARGET_DOWN]
    assert view.polls_total == 1
    assert "Exploding failed; its findings stay as they were" in caplog.text

from __future__ import annotations

import dataclasses
import platform
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime

from prometheus_client import CollectorRegistry, Info, ProcessCollector
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

import lockwatch
from lockwatch.model.findings import Finding, FindingKind, Severity, Subject, subject_label
from lockwatch.model.views import TargetView
from lockwatch.publish.api.encode import utc_now
from lockwatch.publish.api.findings import sorted_findings
from lockwatch.publish.api.locks import lock_counts, lock_groups
from lockwatch.publish.metrics.families import add, gauge
from lockwatch.publish.metrics.incidents import incident_metrics
from lockwatch.publish.metrics.jobs import job_metrics
from lockwatch.publish.metrics.locks import exported_locks, history_metrics, holder_label
from lockwatch.publish.metrics.queues import queue_metrics, source_metrics, worker_metrics
from lockwatch.state.board import Board
from lockwatch.text import printable

# A finding's subject, one label per part (empty when unused, which Prometheus
# reads as absent): database and lock, queue, job, a target's own source.
SUBJECT_FIELDS = tuple(f.name for f in dataclasses.fields(Subject))


SUBJECT_LABELS = tuple(subject_label(name) for name in SUBJECT_FIELDS)


# Every (kind, severity) lockwatch_findings has a series of, per target.
COMBINATIONS = tuple((kind, severity) for kind in FindingKind for severity in Severity)


# Active findings exported one series each, per target; the rest are counted.
FINDING_SERIES_CAP = 100


class BoardCollector(Collector):
    """Renders the board's latest state as fresh metric families at each scrape."""

    def __init__(
        self, board: Board, clock: Callable[[], datetime] = utc_now, only: str | None = None
    ) -> None:
        self._board = board
        self._clock = clock
        self._only = only  # one target's series (a per-target scrape), or all

    def collect(self) -> Iterator[Metric]:
        now = self._clock()
        views = self._board.views()
        if self._only is not None:
            views = tuple(view for view in views if view.target.name == self._only)
        yield from self._poll_metrics(views)
        yield from self._lock_metrics(views, now)
        yield from history_metrics(views)
        yield from self._finding_metrics(views)
        yield from incident_metrics(views)
        yield from source_metrics(views)
        yield from queue_metrics(views)
        yield from worker_metrics(views)
        yield from job_metrics(views)

    def _poll_metrics(self, views: tuple[TargetView, ...]) -> Iterator[Metric]:
        up = gauge(
            "lockwatch_up",
            "1 if the last poll of the target succeeded, 0 if it failed or none finished yet.",
            ["target"],
        )
        duration = gauge(
            "lockwatch_last_poll_duration_seconds",
            "How long the last successful poll of the target took.",
            ["target"],
        )
        polls = CounterMetricFamily(
            "lockwatch_polls_total", "Polls of the target, successful or not.", labels=["target"]
        )
        errors = CounterMetricFamily(
            "lockwatch_poll_errors_total", "Polls of the target that failed.", labels=["target"]
        )
        state_errors = CounterMetricFamily(
            "lockwatch_state_write_errors_total",
            "Saves of the target's hold times and findings to the state dir that failed; "
            "while this grows, a restart forgets them.",
            labels=["target"],
        )
        last_success = gauge(
            "lockwatch_last_successful_poll_timestamp_seconds",
            "Unix time of the last successful poll of the target; absent until one succeeded.",
            ["target"],
        )
        sees = gauge(
            "lockwatch_target_can_see_sessions",
            "1 if lockwatch's role sees every session's activity (it has pg_monitor), 0 if "
            "other roles' sessions are hidden from it; absent until a poll succeeded.",
            ["target"],
        )
        asleep = gauge(
            "lockwatch_target_asleep",
            "1 while lockwatch lets a serverless target sleep (its session closed, looking "
            "again every sleep.interval), else 0.",
            ["target"],
        )
        for view in views:
            target = [view.target.name]
            add(up, target, 1.0 if view.up else 0.0)
            add(asleep, target, 0.0 if view.asleep_since is None else 1.0)
            add(polls, target, view.polls_total)
            add(errors, target, view.poll_errors_total)
            add(state_errors, target, view.state_write_errors_total)
            snapshot = None if view.status is None else view.status.snapshot
            if snapshot is not None:
                add(duration, target, snapshot.poll_seconds)
            if snapshot is not None and snapshot.visibility is not None:
                add(sees, target, 1.0 if snapshot.visibility.sees_all_sessions else 0.0)
            if view.last_success is not None:
                add(last_success, target, view.last_success.timestamp())
        yield from (up, asleep, duration, polls, errors, state_errors, last_success, sees)

    def _lock_metrics(self, views: tuple[TargetView, ...], now: datetime) -> Iterator[Metric]:
        counts = gauge(
            "lockwatch_advisory_locks",
            "Advisory lock holds (state=held) and waits (state=waiting) in the last poll, "
            "not counting ignored keys.",
            ["target", "database", "state"],
        )
        labels = ["target", "database", "lock"]
        hold = gauge(
            "lockwatch_advisory_lock_hold_seconds",
            "Seconds the lock has been held, measured from when lockwatch first saw it "
            "granted, or from an idle holder's last state change, which came after the "
            "grant (PostgreSQL records no grant time); 0 when nobody holds it. "
            "Named locks, plus the longest-held other keys up to top_n per target.",
            labels,
        )
        waiters = gauge(
            "lockwatch_advisory_lock_waiters",
            "Sessions waiting for the lock.",
            labels,
        )
        longest_wait = gauge(
            "lockwatch_advisory_lock_longest_wait_seconds",
            "Seconds the longest-waiting session has waited for the lock; 0 when none waits.",
            labels,
        )
        for view in views:
            snapshot = None if view.status is None else view.status.snapshot
            if snapshot is None:
                # Without a poll result nothing is known; 0 would claim "not held".
                continue
            target = view.target.name
            settings = view.target.locks
            for database, (held, waiting) in sorted(lock_counts(snapshot, settings).items()):
                add(counts, [target, database, "held"], held)
                add(counts, [target, database, "waiting"], waiting)
            groups = lock_groups(snapshot, settings, now, top=settings.top_n)
            for database, lock, exported in exported_locks(groups, settings):
                series = [printable(value) for value in (target, database, lock)]
                if exported is None:
                    hold.add_metric(series, 0.0)
                    waiters.add_metric(series, 0)
                    longest_wait.add_metric(series, 0.0)
                    continue
                hold.add_metric(series, exported.hold_seconds or 0.0)
                waiters.add_metric(series, len(exported.waiters))
                longest_wait.add_metric(series, exported.longest_wait_seconds or 0.0)
        yield from (counts, hold, waiters, longest_wait)

    def _finding_metrics(self, views: tuple[TargetView, ...]) -> Iterator[Metric]:
        counts = gauge(
            "lockwatch_findings",
            "Active findings by kind and severity; every combination is present, 0 when none.",
            ["target", "kind", "severity"],
        )
        active = gauge(
            "lockwatch_finding_active",
            f"1 for each active finding (at most {FINDING_SERIES_CAP} per target, "
            "most severe and oldest first).",
            ["target", "kind", *SUBJECT_LABELS],
        )
        info = gauge(
            "lockwatch_finding_info",
            "1 for each series of lockwatch_finding_active, with the finding's severity and "
            'its holder ("pid 1234 (app from 10.0.0.5)", empty when it names none) for alert '
            "messages. Alert on this without the holder label: a new holder is a new series.",
            ["target", "kind", *SUBJECT_LABELS, "severity", "holder"],
        )
        dropped = gauge(
            "lockwatch_finding_series_dropped",
            "Active findings left out of lockwatch_finding_active by the per-target cap.",
            ["target"],
        )
        for view in views:
            target = view.target.name
            tally: dict[tuple[FindingKind, Severity], int] = {}
            for finding in view.findings:
                tally[finding.kind, finding.severity] = (
                    tally.get((finding.kind, finding.severity), 0) + 1
                )
            # Every combination, 300 targets' worth at each scrape: the kind and
            # severity values are lockwatch's own, only the target's is made printable.
            label = printable(target)
            for kind, severity in COMBINATIONS:
                counts.add_metric(
                    [label, kind.value, severity.value], tally.get((kind, severity), 0)
                )
            shown = _finding_series(view.findings)
            for labels, finding in list(shown.items())[:FINDING_SERIES_CAP]:
                add(active, [target, *labels], 1.0)
                details = [finding.severity.value, holder_label(finding.evidence)]
                add(info, [target, *labels, *details], 1.0)
            add(dropped, [target], max(0, len(shown) - FINDING_SERIES_CAP))
        yield from (counts, active, info, dropped)


def _finding_series(findings: Iterable[Finding]) -> dict[tuple[str, ...], Finding]:
    """Distinct (kind, *subject) label sets, most severe and oldest first,
    each with the first finding that has it."""
    series: dict[tuple[str, ...], Finding] = {}
    for finding in sorted_findings(findings):
        subject = finding.subject
        labels = (finding.kind.value, *(getattr(subject, name) or "" for name in SUBJECT_FIELDS))
        series.setdefault(labels, finding)
    return series


def build_registry(board: Board, clock: Callable[[], datetime] = utc_now) -> CollectorRegistry:
    """lockwatch's own registry: the board collector, the build info and the
    process_* metrics of exporters (CPU, memory, open files, start time)."""
    registry = CollectorRegistry()
    registry.register(BoardCollector(board, clock))
    ProcessCollector(registry=registry)
    build = Info("lockwatch_build", "The lockwatch build that is running.", registry=registry)
    build.info({"version": lockwatch.__version__, "python_version": platform.python_version()})
    return registry

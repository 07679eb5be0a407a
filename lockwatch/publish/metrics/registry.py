"""What ``/metrics`` answers: the board's series, which lockwatch writes itself
(``families.py``), then prometheus_client's collectors (process_*, the build
info, and what the daemon registers: poll lateness, the notifier, the fleet).

A scrape is proportional to what is wrong: a quiet target (no active finding
or open incident, nobody waiting on a lock it exports) gets its summary
series, its named locks (with their hold histograms) and its longest-held
key; the per-key series and histograms of its other keys and the findings'
zeros (every kind and severity at 0) say nothing moved, and come only with
``?detail=full`` or for one target
(``?target=``), as an exporter's optional collectors do. A target with
something wrong gets every series, as before."""

from __future__ import annotations

import dataclasses
import platform
import threading
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime

from prometheus_client import CollectorRegistry, Info, ProcessCollector
from prometheus_client.exposition import choose_encoder

import lockwatch
from lockwatch.model.findings import Finding, FindingKind, Severity, Subject, subject_label
from lockwatch.model.locks import LockSnapshot
from lockwatch.publish.api.findings import sorted_findings
from lockwatch.publish.api.locks import lock_counts, lock_groups
from lockwatch.publish.metrics.families import Exposition, Family, Format, Histogram
from lockwatch.publish.metrics.granted_locks import GrantedLocks
from lockwatch.publish.metrics.incidents import NO_LINKS, WebLinks, incident_metrics
from lockwatch.publish.metrics.jobs import job_metrics
from lockwatch.publish.metrics.lock_waits import lock_wait_metrics
from lockwatch.publish.metrics.locks import exported_locks, history_metrics, holder_label
from lockwatch.publish.metrics.queues import queue_metrics, source_metrics, worker_metrics
from lockwatch.state.board import Board
from lockwatch.state.pace import REASONS as SKIP_REASONS
from lockwatch.state.target_view import TargetView
from lockwatch.util.clock import utc_now

# A finding's subject, one label per part (empty when unused, which Prometheus
# reads as absent): database and lock, queue, job, a target's own source.
SUBJECT_FIELDS = tuple(f.name for f in dataclasses.fields(Subject))


SUBJECT_LABELS = tuple(subject_label(name) for name in SUBJECT_FIELDS)


# Every (kind, severity) lockwatch_findings has a series of, per target, as
# label values: worked out once, not 17,100 times a scrape at 300 targets.
COMBINATIONS = tuple((kind.value, severity.value) for kind in FindingKind for severity in Severity)


# Active findings exported one series each, per target; the rest are counted.
FINDING_SERIES_CAP = 100


class Metrics:
    """What /metrics answers, in the format the scraper asks for."""

    def __init__(
        self, board: Board, clock: Callable[[], datetime] = utc_now, web: WebLinks = NO_LINKS
    ) -> None:
        self._board = board
        self._clock = clock
        self.web = web  # lockwatch's own URL and runbooks, for the alerts' links
        # The process_* metrics of exporters (CPU, memory, open files, start
        # time) and the build info; the daemon registers its own collectors here.
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        build = Info(
            "lockwatch_build", "The lockwatch build that is running.", registry=self.registry
        )
        build.info({"version": lockwatch.__version__, "python_version": platform.python_version()})
        # Each quiet target's keys found so far, kept while its locks stay the
        # same tuple; one scrape at a time reads and grows them.
        self._granted: dict[str, GrantedLocks] = {}
        self._scraping = threading.Lock()

    def render(
        self, accept: str = "", target: str | None = None, *, detail: bool = False
    ) -> tuple[bytes, str]:
        """The exposition and its content type, negotiated from ``accept`` as
        prometheus_client does (OpenMetrics when asked for, else text 0.0.4).
        With ``target`` (a probe from /api/v1/sd) that target's series only,
        all of them; with ``detail`` every target's, quiet or not."""
        encoder, content_type = choose_encoder(accept)
        scrape = Exposition(Format.of(content_type))
        views = every = self._board.views()
        if target is not None:
            views = tuple(view for view in views if view.target.name == target)
        with self._scraping:
            families = board_families(
                views,
                self._clock(),
                scrape,
                self.web,
                detail=detail or bool(target),
                granted=self._granted,
            )
            board = scrape.text(families).encode("utf-8")
            for gone in self._granted.keys() - {view.target.name for view in every}:
                del self._granted[gone]
        rest = scrape.form.end.encode("utf-8") if target is not None else encoder(self.registry)
        return board + rest, content_type


def board_families(
    views: tuple[TargetView, ...],
    now: datetime,
    scrape: Exposition,
    web: WebLinks = NO_LINKS,
    *,
    detail: bool,
    granted: dict[str, GrantedLocks] | None = None,
) -> Iterator[Family | Histogram]:
    """The board's latest state as fresh metric families, at each scrape;
    without ``detail``, a quiet target's series that say nothing moved are
    left out. ``granted``: the quiet targets' keys found by earlier scrapes,
    per target, kept up to date."""
    yield from _poll_metrics(views, scrape)
    yield from _cost_metrics(views, scrape)
    yield from _pace_metrics(views, scrape)
    locks, quiet = _lock_metrics(views, now, scrape, detail, {} if granted is None else granted)
    yield from locks
    yield from history_metrics(views, scrape, quiet)
    yield from lock_wait_metrics(views, now, scrape)
    yield from _finding_metrics(views, scrape, detail)
    yield from incident_metrics(views, scrape, web, detail=detail)
    yield from source_metrics(views, scrape)
    yield from queue_metrics(views, scrape)
    yield from worker_metrics(views, scrape)
    yield from job_metrics(views, scrape)


def _poll_metrics(views: tuple[TargetView, ...], scrape: Exposition) -> Iterator[Family]:
    up = scrape.gauge(
        "lockwatch_up",
        "1 if the last poll of the target succeeded, 0 if it failed or none finished yet.",
        ["target"],
    )
    polls = scrape.counter(
        "lockwatch_polls_total", "Polls of the target, successful or not.", ["target"]
    )
    errors = scrape.counter(
        "lockwatch_poll_errors_total", "Polls of the target that failed.", ["target"]
    )
    state_errors = scrape.counter(
        "lockwatch_state_write_errors_total",
        "Saves of the target's hold times and findings to the state dir that failed; "
        "while this grows, a restart forgets them.",
        ["target"],
    )
    last_success = scrape.gauge(
        "lockwatch_last_successful_poll_timestamp_seconds",
        "Unix time of the last successful poll of the target; absent until one succeeded.",
        ["target"],
    )
    sees = scrape.gauge(
        "lockwatch_target_can_see_sessions",
        "1 if lockwatch's role sees every session's activity (it has pg_monitor), 0 if "
        "other roles' sessions are hidden from it; absent until a poll succeeded.",
        ["target"],
    )
    asleep = scrape.gauge(
        "lockwatch_target_asleep",
        "1 while lockwatch lets a serverless target sleep (its session closed, looking "
        "again every sleep.interval), else 0.",
        ["target"],
    )
    for view in views:
        target = (view.target.name,)
        up.add(target, 1.0 if view.up else 0.0)
        asleep.add(target, 0.0 if view.asleep_since is None else 1.0)
        polls.add(target, view.polls_total)
        errors.add(target, view.poll_errors_total)
        state_errors.add(target, view.state_write_errors_total)
        snapshot = None if view.status is None else view.status.snapshot
        if snapshot is not None and snapshot.visibility is not None:
            sees.add(target, 1.0 if snapshot.visibility.sees_all_sessions else 0.0)
        if view.last_success is not None:
            last_success.add(target, view.last_success.timestamp())
    yield from (up, asleep, polls, errors, state_errors, last_success, sees)


def _cost_metrics(views: tuple[TargetView, ...], scrape: Exposition) -> Iterator[Family]:
    """What the last poll of each target took: its time, and the server's."""
    duration = scrape.gauge(
        "lockwatch_last_poll_duration_seconds",
        "How long the last successful poll of the target took.",
        ["target"],
    )
    server = scrape.gauge(
        "lockwatch_poll_server_seconds",
        "The target's server time per poll of lockwatch, over the last minute: the "
        "execution time pg_stat_statements counts for lockwatch's role in the target's "
        "database. Absent where pg_stat_statements is not installed or counts none of "
        "lockwatch's statements (lockwatch's log says so).",
        ["target"],
    )
    for view in views:
        snapshot = None if view.status is None else view.status.snapshot
        if snapshot is None:
            continue
        duration.add((view.target.name,), snapshot.poll_seconds)
        if snapshot.server_seconds is not None:
            server.add((view.target.name,), snapshot.server_seconds)
    yield from (duration, server)


def _pace_metrics(views: tuple[TargetView, ...], scrape: Exposition) -> Iterator[Family]:
    """How often each target is polled, and the slots of its interval left out."""
    pace = scrape.gauge(
        "lockwatch_poll_interval_seconds",
        "Seconds between the target's polls now: its interval, or up to four times it "
        "while its server's sessions (not lockwatch's own) wait on the lock manager "
        "(LWLock:LockManager), which every poll's read of pg_locks makes them wait on "
        "longer, or backing off (up to "
        "30 s, with jitter) while the target cannot be reached.",
        ["target"],
    )
    skipped = scrape.counter(
        "lockwatch_poll_slots_skipped",
        "Slots of the target's interval not polled: reason=contended while the pace was "
        "slowed for a contended lock manager, reason=overran after a poll that took "
        "longer than the interval, reason=unreachable while backing off from a target "
        "that cannot be reached.",
        ["target", "reason"],
    )
    for view in views:
        target = view.target.name
        if view.poll_interval is not None:
            pace.add((target,), view.poll_interval)
        for reason in SKIP_REASONS:
            skipped.add((target, reason), view.slots_skipped.get(reason, 0))
    yield from (pace, skipped)


# The unnamed keys a quiet target exports without ``detail``: its longest-held.
QUIET_TOP = 1


def _lock_metrics(
    views: tuple[TargetView, ...],
    now: datetime,
    scrape: Exposition,
    detail: bool,
    granted: dict[str, GrantedLocks],
) -> tuple[tuple[Family, ...], frozenset[str]]:
    """The lock families, and the targets found quiet (nothing wrong, nobody
    waiting on a lock they export) when ``detail`` is not asked for."""
    counts, hold, waiters, longest_wait = _lock_families(scrape)
    quiet_targets: list[str] = []
    for view in views:
        snapshot = None if view.status is None else view.status.snapshot
        if snapshot is None:
            # Without a poll result nothing is known; 0 would claim "not held".
            continue
        target = view.target.name
        settings = view.target.locks
        table = _granted_table(view, snapshot, detail, granted)
        tallies = sorted(lock_counts(snapshot, settings, table).items())
        for database, (held, waiting) in tallies:
            counts.add((target, database, "held"), held)
            counts.add((target, database, "waiting"), waiting)
        quiet = not detail and not _wrong(view) and not any(w for _, (_, w) in tallies)
        if quiet:
            quiet_targets.append(target)
        top = min(settings.top_n, QUIET_TOP) if quiet else settings.top_n
        groups = lock_groups(snapshot, settings, now, top=top, table=table, unnamed_top=True)
        for database, lock, exported in exported_locks(groups, settings):
            series = (target, database, lock)
            if exported is None:
                hold.add(series, 0.0)
                waiters.add(series, 0)
                longest_wait.add(series, 0.0)
                continue
            hold.add(series, exported.hold_seconds or 0.0)
            if quiet and exported.name is None:
                continue  # nobody waits: a quiet key's waits say nothing moved
            waiters.add(series, len(exported.waiters))
            longest_wait.add(series, exported.longest_wait_seconds or 0.0)
    return (counts, hold, waiters, longest_wait), frozenset(quiet_targets)


def _lock_families(scrape: Exposition) -> tuple[Family, Family, Family, Family]:
    """The advisory-lock families: counts per state, and each exported key's
    hold, waiters and longest wait."""
    counts = scrape.gauge(
        "lockwatch_advisory_locks",
        "Advisory lock holds (state=held) and waits (state=waiting) in the last poll, "
        "not counting ignored keys.",
        ["target", "database", "state"],
    )
    labels = ["target", "database", "lock"]
    hold = scrape.gauge(
        "lockwatch_advisory_lock_hold_seconds",
        "Seconds the lock has been held, measured from when lockwatch first saw it "
        "granted, or from an idle holder's last state change, which came after the "
        "grant (PostgreSQL records no grant time); 0 when nobody holds it. "
        "Named locks, plus the longest-held other keys up to top_n per target (of a "
        "target with nothing wrong, its longest-held one, unless ?detail=full or ?target=).",
        labels,
    )
    waiters = scrape.gauge(
        "lockwatch_advisory_lock_waiters",
        "Sessions waiting for the lock (absent where the hold time's series is alone: "
        "a key of a target with nothing wrong, which nobody waits for).",
        labels,
    )
    longest_wait = scrape.gauge(
        "lockwatch_advisory_lock_longest_wait_seconds",
        "Seconds the longest-waiting session has waited for the lock; 0 when none waits.",
        labels,
    )
    return counts, hold, waiters, longest_wait


def _granted_table(
    view: TargetView, snapshot: LockSnapshot, detail: bool, granted: dict[str, GrantedLocks]
) -> GrantedLocks | None:
    """The few keys a target that may be quiet needs, found without grouping
    every lock and kept while its locks stay the same (a scrape with every
    series leaves what the others keep as it is); None: group them all."""
    target = view.target.name
    table = None
    if not detail and not _wrong(view):
        table = GrantedLocks.of(snapshot, granted.get(target))
    if table is not None:
        granted[target] = table
    elif not detail:
        granted.pop(target, None)
    return table


def _wrong(view: TargetView) -> bool:
    """Something wrong on the target: an active finding or an open incident
    (else it is quiet, unless somebody waits on a lock it exports)."""
    return bool(view.findings or view.incidents)


def _finding_metrics(
    views: tuple[TargetView, ...], scrape: Exposition, detail: bool
) -> Iterator[Family]:
    counts = scrape.gauge(
        "lockwatch_findings",
        "Active findings by kind and severity, the combinations with findings (with "
        "?detail=full or ?target=, every combination, 0 when none).",
        ["target", "kind", "severity"],
    )
    active = scrape.gauge(
        "lockwatch_finding_active",
        f"1 for each active finding (at most {FINDING_SERIES_CAP} per target, "
        "most severe and oldest first).",
        ["target", "kind", *SUBJECT_LABELS],
    )
    info = scrape.gauge(
        "lockwatch_finding_info",
        "1 for each series of lockwatch_finding_active, with the finding's severity and "
        'its holder ("pid 1234 (app from 10.0.0.5)", empty when it names none) for alert '
        "messages. Alert on this without the holder label: a new holder is a new series.",
        ["target", "kind", *SUBJECT_LABELS, "severity", "holder"],
    )
    dropped = scrape.gauge(
        "lockwatch_finding_series_dropped",
        "Active findings left out of lockwatch_finding_active by the per-target cap "
        "(absent when none is, unless ?detail=full or ?target=).",
        ["target"],
    )
    for view in views:
        target = view.target.name
        tally: dict[tuple[str, str], int] = {}
        for finding in view.findings:
            combination = (finding.kind.value, finding.severity.value)
            tally[combination] = tally.get(combination, 0) + 1
        for combination in COMBINATIONS if detail else sorted(tally, key=COMBINATIONS.index):
            counts.add((target, *combination), tally.get(combination, 0))
        shown = _finding_series(view.findings)
        for labels, finding in list(shown.items())[:FINDING_SERIES_CAP]:
            active.add((target, *labels), 1.0)
            details = (finding.severity.value, holder_label(finding.evidence))
            info.add((target, *labels, *details), 1.0)
        if detail or len(shown) > FINDING_SERIES_CAP:
            dropped.add((target,), max(0, len(shown) - FINDING_SERIES_CAP))
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

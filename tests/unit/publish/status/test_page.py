"""The status page renderer on synthetic views: incidents first, escaping,
evidence, history, chart, the refresh switch and the page's weight."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, replace

from lockwatch.detect.locks import detect_locks
from lockwatch.model.evidence import QueueStallEvidence, WorkerFacts
from lockwatch.model.findings import Finding, FindingKind, Severity, Subject
from lockwatch.model.incidents import Impact, IncidentRoot, RootKind
from lockwatch.model.jobs import JobRun, JobView, RunStatus
from lockwatch.model.queues import QueueSample, QueueView, SessionWait, WorkerSample, WorkerView
from lockwatch.model.views import TargetStatus
from lockwatch.publish.status.cells import TABLE_ROWS
from lockwatch.publish.status.history import History, sparkline
from lockwatch.publish.status.locks import LOCKS_SHOWN
from lockwatch.publish.status.page import StatusPage
from lockwatch.settings.locks import LockSettings
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.target_view import TargetView
from tests.fixtures.evidence import queue_evidence
from tests.fixtures.incident_values import TERMINATE, incident, resolved, session_root
from tests.fixtures.snapshots import NOW, TARGET, ago, backend, held, snapshot, waiting

HOSTILE = "<img src=x onerror=alert(1)>"


@dataclass
class Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


def convoy_view() -> TargetView:
    snap = snapshot(
        held(42, 1234, held_for=800),
        waiting(42, 1301, waited_for=300),
        waiting(42, 1302, waited_for=200),
        backends=[
            backend(1234, HOSTILE, idle_for=700, query=f"SELECT '{HOSTILE}'"),
            backend(1301, f"{HOSTILE}-2", waits_on=[1234]),
            backend(1302, "worker-3", waits_on=[1234]),
        ],
    )
    target = Target(TARGET, "postgresql://mon:s3cret@db/app")
    findings = tuple(detect_locks(snap, target.locks, NOW))
    root = session_root(app=HOSTILE)
    return TargetView(
        target,
        TargetStatus(TARGET, NOW, snap),
        polls_total=1,
        last_success=NOW,
        findings=findings,
        incidents=(incident(list(findings), root=root, title=f"pid 1234 {HOSTILE} holds 42"),),
    )


def render(*views: TargetView, refresh: bool = True) -> str:
    board = Board()
    for view in views:
        board.publish(view)
    return StatusPage(board, clock=lambda: NOW).render(refresh=refresh)


def test_database_values_are_escaped_everywhere_they_appear() -> None:
    page = render(convoy_view())

    assert "<img" not in page
    assert page.count("&lt;img src=x onerror=alert(1)&gt;") >= 4
    assert "s3cret" not in page


def test_a_convoy_shows_its_holder_waiters_chain_and_budgets() -> None:
    page = render(convoy_view())

    assert "lock_convoy" in page and "lock_orphaned" in page
    assert "<h4>blocking chain</h4>" in page
    assert "<dt>max hold</dt><dd>5m</dd>" in page
    assert "2 waiting, the longest for 5m" in page
    assert re.search(r"<td>1234</td>.*?<td>13m20s</td>", page)


def test_evidence_of_kinds_the_page_does_not_know_is_still_shown() -> None:
    finding = Finding(
        kind=FindingKind.QUEUE_STALLED,
        target=TARGET,
        subject=Subject(database="app"),
        severity=Severity.WARNING,
        since=NOW,
        summary="queue grows, workers idle",
        evidence=QueueStallEvidence.of(
            queue_evidence(
                depth=1200,
                window_seconds=600.0,
                workers=(WorkerFacts("webhook-workers", 7, 1.5, None, ()),),
            ),
            None,
        ),
    )
    root = IncidentRoot(RootKind.QUEUE, TARGET, queue="webhooks")
    view = TargetView(
        Target(TARGET, "postgresql://db/app"),
        findings=(finding,),
        incidents=(incident([finding], root=root),),
    )

    page = render(view)

    assert "<dt>depth</dt><dd>1200</dd>" in page
    assert "<dt>window</dt><dd>10m</dd>" in page
    assert "<th>cpu cores</th>" in page and "<td>1.5</td>" in page


def test_an_empty_board_is_all_clear() -> None:
    page = render(TargetView(Target(TARGET, "postgresql://db/app")))

    assert "Nothing is wrong right now." in page
    assert "<title>lockwatch: all clear</title>" in page


def test_history_keeps_the_peak_of_each_slot_and_forgets_what_is_older_than_the_window() -> None:
    clock = Clock()
    history = History(window=100.0, points=10, monotonic=clock)
    calm = TargetView(
        Target(TARGET, "x", locks=LockSettings()), TargetStatus(TARGET, NOW, snapshot())
    )
    busy = convoy_view()

    history.record(calm)
    clock.now = 5.0
    history.record(busy)
    clock.now = 50.0
    history.record(calm)
    assert history.points(TARGET, "waiting") == [(50.0, 2.0), (0.0, 0.0)]

    clock.now = 140.0
    assert history.points(TARGET, "waiting") == [(90.0, 0.0)]


def test_the_sparkline_puts_the_newest_point_at_the_right_edge_and_the_peak_at_the_top() -> None:
    svg = sparkline([(60.0, 0.0), (30.0, 4.0), (0.0, 2.0)], window=60.0, width=120, height=40)

    assert 'points="0.0,38.0 60.0,2.0 120.0,20.0"' in svg
    assert "now 2, highest 4" in svg


def queue_view(depth: int) -> TargetView:
    queue = QueueView(
        name="webhooks<b>",
        source="webhooks",
        window=60.0,
        latest=QueueSample(at=NOW, depth=depth, oldest_age_seconds=95.0, in_flight=1),
        growth_per_second=2.0,
        workers=("webhook-workers",),
    )
    workers = WorkerView(
        name="webhook-workers",
        queues=("webhooks<b>",),
        window=60.0,
        latest=WorkerSample(at=NOW, cpu_seconds=12.0, processes=6),
        cpu_cores=0.02,
        sessions={"active": 1, "waiting_lock": 5},
        waiting_on=(SessionWait(database="app", lock="42", key="42", sessions=5),),
    )
    return TargetView(Target(TARGET, "postgresql://db/app"), queues=(queue,), workers=(workers,))


def test_queues_show_depth_growth_and_their_workers_cpu_and_lock_waits() -> None:
    page = render(queue_view(120))

    assert "<h2>Queues and workers</h2>" in page
    assert "<td>webhooks&lt;b&gt;</td><td>120</td><td>1m35s</td><td>1</td><td>+2.00/s</td>" in page
    assert "<td>2% of a core</td><td>1 active, 5 waiting_lock</td>" in page
    assert "5 on lock 42 in app" in page


def test_a_page_without_queues_has_no_queue_section() -> None:
    assert "Queues and workers" not in render(convoy_view())


def test_history_charts_each_queue_depth() -> None:
    clock = Clock()
    history = History(window=100.0, points=10, monotonic=clock)

    for depth in (10, 20, 30):
        history.record(queue_view(depth))
        clock.now += 10

    assert [v for _, v in history.points(TARGET, "queue webhooks<b>")] == [10.0, 20.0, 30.0]


def job_view() -> TargetView:
    runs = (
        JobRun("nightly-report", "2026-11-29", ago(60), host="<b>app-2</b>", source="ping"),
        JobRun(
            "nightly-report",
            "2026-11-29",
            ago(70),
            finished_at=ago(10),
            status=RunStatus.SUCCESS,
            host="app-1",
            source="ping",
            exit_code=0,
        ),
    )
    job = JobView(
        "nightly-report",
        "ping",
        starts_total=2,
        duplicate_starts_total=1,
        running=1,
        last_start=ago(60),
        last_success=ago(10),
        last_duration=60.0,
        recent=runs,
    )
    return TargetView(Target(TARGET, "postgresql://db/app"), jobs=(job,))


def test_jobs_show_their_counters_and_latest_runs() -> None:
    page = render(job_view())

    assert "<h2>Jobs</h2>" in page
    assert "2 start(s), 1 duplicate(s), 1 running" in page
    assert "last run took 1m" in page
    assert "&lt;b&gt;app-2&lt;/b&gt;" in page and "<b>app-2" not in page
    assert page.count("<td>2026-11-29</td>") == 2
    assert "<td>success</td>" in page and "<td>running</td>" in page


def test_a_target_with_many_locks_shows_the_longest_held_and_counts_the_rest() -> None:
    locks = [held(key, 1000 + key, held_for=float(key)) for key in range(LOCKS_SHOWN + 10)]
    view = TargetView(
        Target(TARGET, "postgresql://db/app"),
        TargetStatus(TARGET, NOW, snapshot(*locks)),
        last_success=NOW,
    )

    page = render(view)

    assert page.count('<div class="lock">') == LOCKS_SHOWN
    assert f"<h4>lock {LOCKS_SHOWN + 9} " in page, "the longest-held lock is left out"
    assert "<h4>lock 0 " not in page
    assert "and 10 more, held for less long" in page


def test_a_convoy_of_thousands_lists_the_first_waiters_and_counts_the_rest() -> None:
    waiters = [waiting(42, 2000 + n, waited_for=10) for n in range(TABLE_ROWS + 25)]
    view = TargetView(
        Target(TARGET, "postgresql://db/app"),
        TargetStatus(TARGET, NOW, snapshot(held(42, 1234, held_for=60), *waiters)),
    )

    page = render(view)

    assert f"<td>{2000 + TABLE_ROWS - 1}</td>" in page
    assert f"<td>{2000 + TABLE_ROWS}</td>" not in page
    assert ">and 25 more</td>" in page


def test_open_incidents_lead_the_page_with_their_root_next_step_and_runbook() -> None:
    page = render(convoy_view())

    assert page.index('<section id="incidents">') < page.index('<section id="locks">')
    assert "<h2>Open incidents (1)</h2>" in page
    assert '<strong class="mark">root</strong> pid 1234 · &lt;img' in page
    assert f"<pre><code>{html.escape(TERMINATE)}</code></pre>" in page
    assert "<dt>next step</dt><dd>end the holder&#x27;s session</dd>" in page
    assert '#lockwatchlockconvoy">runbook: lock_convoy</a>' in page
    assert "<title>lockwatch: 1 open incident</title>" in page


def test_the_lock_its_incident_blames_marks_its_holder_as_the_root_without_blocked_by_lists() -> (
    None
):
    page = render(convoy_view())
    locks = page[page.index('<section id="locks">') :]

    assert 'held by pid 1234, the root of <a href="#incident-inc-1">incident inc-1</a>' in locks
    assert "<th>blocked by</th>" not in locks


def test_recently_resolved_incidents_follow_with_how_they_ended_and_their_timeline() -> None:
    view = convoy_view()
    ended = resolved(incident(opened_at=ago(300)), after=0)
    page = render(replace(view, incidents=(), resolved_incidents=(ended,)))

    assert "Nothing is wrong right now." in page
    section = page[page.index('<section id="resolved">') :]
    assert "<h2>Recently resolved (1)</h2>" in section
    assert "resolved (released)" in section and "after 5m" in section
    assert '<ol class="timeline">' in section
    assert "<strong>resolved</strong> the holder released its locks" in section
    assert "next step" not in section and "pg_terminate_backend" not in section


def test_auto_refresh_turns_off_from_a_link_and_the_page_then_has_no_meta_refresh() -> None:
    refreshing = render(convoy_view())
    assert '<meta http-equiv="refresh" content=' in refreshing
    assert '<a href="/?refresh=off">stop auto-refresh</a>' in refreshing

    still = render(convoy_view(), refresh=False)
    assert 'http-equiv="refresh"' not in still
    assert '<a href="/">turn it on</a>' in still
    assert "<script" not in refreshing + still


def test_a_session_holding_4001_locks_is_one_card_and_the_page_stays_under_50_kb() -> None:
    snap = snapshot(
        *(held(key, 1234, held_for=900) for key in range(4001)),
        backends=[backend(1234, "psql", idle_for=800, query="SELECT pg_advisory_lock(n)")],
    )
    target = Target(TARGET, "postgresql://db/app")
    findings = detect_locks(snap, target.locks, NOW)
    hog = incident(
        findings,
        root=session_root(app="psql"),
        finding_count=len(findings),
        impact=Impact(locks_held=4001),
        locks=tuple(f"app/{key}" for key in range(5)),
    )
    view = TargetView(
        target,
        TargetStatus(TARGET, NOW, snap),
        last_success=NOW,
        findings=tuple(findings),
        incidents=(hog,),
    )

    page = render(view)

    assert page.count('<article class="incident') == 1
    assert "app/0, app/1, app/2, app/3, app/4 and 3996 more" in page
    assert len(page.encode("utf-8")) < 50_000, f"{len(page.encode()) / 1024:.0f} KB"

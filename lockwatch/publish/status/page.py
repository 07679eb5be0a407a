from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Any

import lockwatch
from lockwatch.model.incidents import SEVERITY_RANK, Incident
from lockwatch.model.locks import HIDDEN
from lockwatch.publish.api.jobs import jobs_document
from lockwatch.publish.api.locks import locks_document
from lockwatch.publish.api.queues import queues_document
from lockwatch.publish.status.cells import (
    escape,
    moment,
    moment_text,
    percent_of_a_core,
    seconds_text,
    table,
)
from lockwatch.publish.status.history import WAITING, History, queue_series, sparkline
from lockwatch.publish.status.incidents import open_section, resolved_section
from lockwatch.publish.status.locks import (
    LOCKS_SHOWN,
    counts_cell,
    detailed_targets,
    locks_section,
)
from lockwatch.state.board import Board
from lockwatch.state.deliveries import Deliveries
from lockwatch.state.target_view import TargetView
from lockwatch.text import iso_utc
from lockwatch.util.clock import utc_now

REFRESH_BOUNDS = (2.0, 30.0)  # the page reloads every poll interval, within these


# Under the state of a target whose DSN goes through a transaction pooler.
POOLED_NOTE = (
    "read through a transaction pooler: pg_locks is right this way, but give lockwatch a "
    "direct DSN so that its session stays one backend (target_transaction_pooled says what "
    "it does meanwhile)"
)
RESOLVED_SHOWN = 10  # recently resolved incidents, newest first; /api/v1/incidents has more
DOWN_ROWS = 20  # down targets shown row by row; the rest are named in one row


@dataclass(frozen=True)
class Page:
    """Everything one rendering needs, read once so every section agrees."""

    now: datetime
    views: tuple[TargetView, ...]
    incidents: tuple[Incident, ...]  # open, every target's, worst first, then the oldest
    resolved: tuple[Incident, ...]  # recently resolved, newest first
    # The targets whose locks are shown one by one (status/locks.py), and
    # each one's entry in /api/v1/locks, cut to the first LOCKS_SHOWN locks.
    detailed: tuple[TargetView, ...]
    locks: dict[str, dict[str, Any]]
    queues: dict[str, dict[str, Any]]  # target -> its queues and workers, as /api/v1/queues
    jobs: dict[str, list[dict[str, Any]]]  # target -> its jobs, as /api/v1/jobs
    history: History
    refresh: bool = True  # reload every poll interval; off at /?refresh=off


class StatusPage:
    """Renders the board as the status page; keeps the history for its charts."""

    def __init__(self, board: Board, clock: Callable[[], datetime] = utc_now) -> None:
        self._board = board
        self._clock = clock
        self.history = History(monotonic=board.monotonic)
        board.subscribe(self.history.record)
        self.deliveries: Deliveries | None = None  # joined to the cards' timelines

    def render(self, *, refresh: bool = True) -> str:
        """The page; without ``refresh`` (``/?refresh=off``), no meta refresh."""
        now = self._clock()
        views = self._board.views()
        incidents = open_incidents(views)
        detailed = detailed_targets(views, incidents)
        resolved = resolved_incidents(views)
        if self.deliveries is not None:
            incidents = tuple(self.deliveries.joined(incident) for incident in incidents)
            resolved = tuple(self.deliveries.joined(incident) for incident in resolved)
        page = Page(
            now=now,
            views=views,
            incidents=incidents,
            resolved=resolved,
            detailed=detailed,
            locks={
                entry["target"]: entry
                for entry in locks_document(detailed, now, shown=LOCKS_SHOWN)["targets"]
            },
            queues={entry["target"]: entry for entry in queues_document(views)["targets"]},
            jobs={entry["target"]: entry["jobs"] for entry in jobs_document(views)["targets"]},
            history=self.history,
            refresh=refresh,
        )
        return render_page(page)


def open_incidents(views: Iterable[TargetView]) -> tuple[Incident, ...]:
    found = [incident for view in views for incident in view.incidents]
    return tuple(sorted(found, key=lambda i: (SEVERITY_RANK[i.severity], i.opened_at, i.id)))


def resolved_incidents(views: Iterable[TargetView]) -> tuple[Incident, ...]:
    found = [incident for view in views for incident in view.resolved_incidents]
    newest = sorted(found, key=lambda i: i.resolved_at or i.updated_at, reverse=True)
    return tuple(newest[:RESOLVED_SHOWN])


def _incidents_section(page: Page) -> str:
    return open_section(page.now, page.incidents)


def _resolved_section(page: Page) -> str:
    return resolved_section(page.now, page.resolved)


def _locks_section(page: Page) -> str:
    return locks_section(page.views, page.detailed, page.locks, page.incidents)


def _targets_section(page: Page) -> str:
    rows = []
    down = [v for v in page.views if v.status is not None and not v.up]
    # A fleet that went away is one row past the first few, not thousands.
    folded = {v.target.name for v in down[DOWN_ROWS:]} if len(down) > DOWN_ROWS + 1 else set()
    for view in page.views:
        if view.target.name in folded:
            continue
        status = view.status
        snapshot = None if status is None else status.snapshot
        state = "waiting for the first poll" if status is None else ("up" if view.up else "down")
        state = state if view.asleep_since is None else "asleep (serverless)"
        error = (
            ""
            if status is None or status.error is None
            else f"<br><small>{escape(status.error)}</small>"
        )
        if status is not None and status.pooling is not None:
            error += f'<br><small class="pooled">{escape(POOLED_NOTE)}</small>'
        if snapshot is not None and snapshot.sessions_hidden:
            error += f"<br><small>other roles' sessions {escape(HIDDEN)}</small>"

        chart = sparkline(page.history.points(view.target.name, WAITING), page.history.window)
        rows.append(
            f'<tr class="{"up" if view.up else "down"}"><td>{escape(view.target.name)}</td>'
            f"<td>{escape(state)}{error}</td>"
            f"<td>{moment(page.now, iso_utc(view.last_success))}</td>"
            f"<td>{escape(None if snapshot is None else f'{snapshot.poll_seconds * 1000:.0f} ms')}</td>"
            f"<td>{counts_cell(view)}</td>"
            f"<td>{view.polls_total}</td><td>{view.poll_errors_total}</td>"
            f"<td>{view.state_write_errors_total}</td><td>{chart}</td></tr>"
        )
    if folded:
        names = ", ".join(sorted(folded))
        rows.append(
            f'<tr class="down"><td colspan="9">and {len(folded)} more targets down, '
            f"each looked at less often while it fails: <small>{escape(names)}</small></td></tr>"
        )
    head = (
        "<tr><th>target</th><th>state</th><th>last successful poll</th><th>poll took</th>"
        "<th>advisory locks</th><th>polls</th><th>failed</th><th>state saves failed</th>"
        "<th>waiting on advisory locks, up to the last hour</th></tr>"
    )
    return (
        '<section id="targets"><h2>Targets</h2>'
        f"<table><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table></section>"
    )


def _queue_rows(page: Page, target: str, queues: list[dict[str, Any]]) -> str:
    rows = []
    for queue in queues:
        growth = queue["growth_per_second"]
        chart = sparkline(
            page.history.points(target, queue_series(queue["name"])), page.history.window
        )
        # A stale queue shows unknown, never its frozen backlog, and when it was last read.
        depth = "unknown" if queue["stale"] else queue["depth"]
        rows.append(
            f"<tr><td>{escape(queue['name'])}</td><td>{escape(depth)}</td>"
            f"<td>{seconds_text(queue['oldest_age_seconds'])}</td><td>{escape(queue['in_flight'])}</td>"
            f"<td>{escape(None if growth is None else f'{growth:+.2f}/s')}</td>"
            f"<td>{escape(', '.join(queue['workers']))}</td>"
            f"<td>{moment(page.now, queue['observed_at'])}</td><td>{chart}</td></tr>"
        )
    return (
        "<table><thead><tr><th>queue</th><th>pending</th><th>oldest</th><th>in flight</th>"
        "<th>growth</th><th>workers</th><th>read</th><th>pending, up to the last hour</th>"
        "</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _worker_rows(workers: list[dict[str, Any]]) -> str:
    rows = []
    for group in workers:
        sessions = ", ".join(f"{n} {state}" for state, n in (group["sessions"] or {}).items() if n)
        waits = ", ".join(
            f"{w['sessions']} on lock {w['lock']} in {w['database']}" for w in group["waiting_on"]
        )
        rows.append(
            f"<tr><td>{escape(group['name'])}</td><td>{escape(', '.join(group['queues']))}</td>"
            f"<td>{escape(group['processes'])}</td><td>{percent_of_a_core(group['cpu_cores'])}</td>"
            f"<td>{escape(sessions or None)}</td><td>{escape(waits or None)}</td></tr>"
        )
    return (
        "<table><thead><tr><th>workers</th><th>queues</th><th>processes</th><th>CPU</th>"
        "<th>sessions</th><th>waiting</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _queues_section(page: Page) -> str:
    """Shown only for targets with queues or worker groups."""
    blocks = []
    for view in page.views:
        entry = page.queues.get(view.target.name) or {}
        queues, workers = entry.get("queues") or [], entry.get("workers") or []
        if queues or workers:
            blocks.append(
                f"<h3>{escape(view.target.name)}</h3>"
                + (_queue_rows(page, view.target.name, queues) if queues else "")
                + (_worker_rows(workers) if workers else "")
            )
    if not blocks:
        return ""
    return f'<section id="queues"><h2>Queues and workers</h2>{"".join(blocks)}</section>'


RECENT_RUNS = 5  # runs shown per job, newest first


def _jobs_section(page: Page) -> str:
    """Shown only for targets that follow jobs."""
    blocks = []
    for view in page.views:
        jobs = page.jobs.get(view.target.name) or []
        if not jobs:
            continue
        rows = []
        for job in jobs:
            runs = table(
                [
                    {
                        "run_key": run["run_key"],
                        "started": moment_text(page.now, run["started_at"]),
                        "finished": moment_text(page.now, run["finished_at"]),
                        "status": run["status"],
                        "host": run["host"],
                        "exit_code": run["exit_code"],
                        "source": run["source"],
                    }
                    for run in job["recent_runs"][:RECENT_RUNS]
                ]
            )
            duplicates = job["duplicate_starts_total"]
            rows.append(
                f'<div class="job"><h4>{escape(job["name"])} <span class="where">'
                f"{escape(job['source'])}; {escape(job['starts_total'])} start(s), "
                f"{escape(duplicates)} duplicate(s), {escape(job['running'])} running; last success "
                f"{moment(page.now, job['last_success'])}, last run took "
                f"{seconds_text(job['last_duration_seconds'])}</span></h4>"
                f"{runs if job['recent_runs'] else '<p>no runs seen yet</p>'}</div>"
            )
        blocks.append(f"<h3>{escape(view.target.name)}</h3>{''.join(rows)}")
    if not blocks:
        return ""
    return f'<section id="jobs"><h2>Jobs</h2>{"".join(blocks)}</section>'


# The page, top to bottom.
SECTIONS: tuple[Callable[[Page], str], ...] = (
    _incidents_section,
    _resolved_section,
    _locks_section,
    _queues_section,
    _jobs_section,
    _targets_section,
)


# Inlined into every page: the page's CSP allows no style sheet of its own.
_STYLE = (resources.files(__package__) / "page.css").read_text(encoding="utf-8")


def _refresh_seconds(views: Iterable[TargetView]) -> int:
    intervals = [view.target.interval for view in views]
    low, high = REFRESH_BOUNDS
    return round(min(max(min(intervals, default=high), low), high))


def _refresh_control(page: Page, seconds: int) -> tuple[str, str]:
    """The meta refresh (none when turned off: it closes evidence a reader
    opened) and the link that turns it off or on again, without a script."""
    if not page.refresh:
        return "", '<span>auto-refresh off · <a href="/">turn it on</a></span>'
    meta = f'<meta http-equiv="refresh" content="{seconds}">\n'
    return meta, (f'<span>every {seconds}s · <a href="/?refresh=off">stop auto-refresh</a></span>')


def render_page(page: Page) -> str:
    count = len(page.incidents)
    down = sum(1 for view in page.views if view.status is not None and not view.up)
    headline = f"{count} open incident{'s' if count != 1 else ''}" if count else "all clear"
    if down:
        headline += f", {down} target{'s' if down != 1 else ''} down"
    meta, control = _refresh_control(page, _refresh_seconds(page.views))
    stamp = iso_utc(page.now) or ""
    body = "".join(section(page) for section in SECTIONS)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
{meta}<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(f"lockwatch: {headline}")}</title>
<style>{_STYLE}</style></head>
<body>
<header class="{"bad" if count or down else "good"}"><h1>lockwatch</h1><span id="headline">{escape(headline)}</span>
<span>updated {escape(stamp.replace("T", " ").replace("Z", " UTC"))}</span>
{control}</header>
<main>{body}</main>
<footer>lockwatch {escape(lockwatch.__version__)} ·
<a href="/metrics">/metrics</a> ·
<a href="/api/v1/incidents">/api/v1/incidents</a> ·
<a href="/api/v1/findings">/api/v1/findings</a> ·
<a href="/api/v1/locks">/api/v1/locks</a> ·
<a href="/healthz">/healthz</a></footer>
</body></html>
"""

"""The status page at ``/``: what is wrong now, for a person without Grafana.

One self-contained HTML document (inline CSS and SVG, no scripts, no external
assets) that reloads itself. It renders the same documents the JSON API
serves, so the page, the API and the metrics always agree. Every value that
reaches the page goes through :func:`_e`: application names, queries and lock
names come from any client of the database.

Sections are functions from a :class:`Page` to HTML, listed in ``SECTIONS``;
numbers worth a chart of the last hour come from :func:`measures`.
"""

from __future__ import annotations

import html
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import lockwatch
from lockwatch.board import Board, TargetView
from lockwatch.detect.locks import format_duration
from lockwatch.publish.api import findings_document, iso_utc, locks_document, utc_now
from lockwatch.publish.job_api import jobs_document
from lockwatch.publish.queue_api import queues_document

CHART_WINDOW = 3600.0  # seconds of history behind each chart
CHART_POINTS = 360  # at most this many points per chart; peaks win within a slot
REFRESH_BOUNDS = (2.0, 30.0)  # the page reloads every poll interval, within these
LOCKS_SHOWN = 50  # per target, longest-held first; /api/v1/locks has them all
TABLE_ROWS = 50  # sessions per table (a convoy of thousands); the API has them all


WAITING = "waiting"


def queue_series(queue: str) -> str:
    return f"queue {queue}"


def measures(view: TargetView) -> dict[str, float]:
    """What the charts plot, from one published view of a target: sessions
    waiting on advisory locks, and the depth of each queue; only what the
    view knows."""
    found: dict[str, float] = {}
    snapshot = None if view.status is None else view.status.snapshot
    if snapshot is not None:
        ignored = view.target.locks.ignored
        found[WAITING] = float(
            sum(
                1
                for lock in snapshot.locks
                if not lock.granted and not ignored(lock.database, lock.key)
            )
        )
    for queue in view.queues:
        if queue.latest is not None:
            found[queue_series(queue.name)] = float(queue.latest.depth)
    return found


class History:
    """The last hour of each measure per target, fed by every published view."""

    def __init__(
        self,
        window: float = CHART_WINDOW,
        points: int = CHART_POINTS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window = window
        self.slot = window / points
        self._monotonic = monotonic
        self._series: dict[tuple[str, str], deque[tuple[float, float]]] = {}
        self._lock = threading.Lock()

    def record(self, view: TargetView) -> None:
        now = self._monotonic()
        for name, value in measures(view).items():
            with self._lock:
                series = self._series.setdefault((view.target.name, name), deque())
                if series and now - series[-1][0] < self.slot:
                    # One point per slot, the highest: a convoy that came and
                    # went between two slots still shows.
                    series[-1] = (series[-1][0], max(series[-1][1], value))
                else:
                    series.append((now, value))
                while series and now - series[0][0] > self.window:
                    series.popleft()

    def points(self, target: str, name: str) -> list[tuple[float, float]]:
        """(seconds ago, value) pairs, oldest first."""
        now = self._monotonic()
        with self._lock:
            series = list(self._series.get((target, name), ()))
        return [(now - at, value) for at, value in series if now - at <= self.window]


@dataclass(frozen=True)
class Page:
    """Everything one rendering needs, read once so every section agrees."""

    now: datetime
    views: tuple[TargetView, ...]
    findings: list[dict[str, Any]]  # as /api/v1/findings serves them
    # target -> its entry in /api/v1/locks, cut to the first LOCKS_SHOWN locks
    locks: dict[str, dict[str, Any]]
    queues: dict[str, dict[str, Any]]  # target -> its queues and workers, as /api/v1/queues
    jobs: dict[str, list[dict[str, Any]]]  # target -> its jobs, as /api/v1/jobs
    history: History


class StatusPage:
    """Renders the board as the status page; keeps the history for its charts."""

    def __init__(self, board: Board, clock: Callable[[], datetime] = utc_now) -> None:
        self._board = board
        self._clock = clock
        self.history = History(monotonic=board.monotonic)
        board.subscribe(self.history.record)

    def render(self) -> str:
        now = self._clock()
        views = self._board.views()
        page = Page(
            now=now,
            views=views,
            findings=findings_document(views)["findings"],
            locks={
                entry["target"]: entry
                for entry in locks_document(views, now, shown=LOCKS_SHOWN)["targets"]
            },
            queues={entry["target"]: entry for entry in queues_document(views)["targets"]},
            jobs={entry["target"]: entry["jobs"] for entry in jobs_document(views)["targets"]},
            history=self.history,
        )
        return render_page(page)


# ---------------------------------------------------------------------------
# Rendering helpers


def _e(value: object) -> str:
    """Any value as HTML text, escaped (quotes too, so it is safe in attributes)."""
    return html.escape("—" if value is None else str(value), quote=True)


def _seconds(value: object) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _e(format_duration(value))
    return _e(value)


def _moment_text(now: datetime, iso: str | None) -> str | None:
    """
    >>> _moment_text(datetime.fromisoformat("2026-11-29T03:05:00+00:00"), "2026-11-29T03:00:00Z")
    '2026-11-29 03:00:00 UTC (5m ago)'
    """
    if iso is None:
        return None
    since = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    ago = format_duration((now - since).total_seconds())
    return f"{iso.replace('T', ' ').replace('Z', ' UTC')} ({ago} ago)"


def _moment(now: datetime, iso: str | None) -> str:
    text = _moment_text(now, iso)
    if iso is None or text is None:
        return _e(None)
    return f'<time datetime="{_e(iso)}">{_e(text)}</time>'


_LABELS = {
    "pid": "pid",
    "application_name": "application",
    "client_addr": "address",
    "usename": "user",
    "state": "state",
    "state_seconds": "for",
    "held_seconds": "held",
    "wait_seconds": "waited",
    "xact_seconds": "in transaction",
    "mode": "mode",
    "blocked_by": "blocked by",
    "query": "last query",
}
# Columns that say nothing a person needs next to the others.
_HIDDEN = {"wait_event_type", "wait_event", "cycle"}


def _label(key: str) -> str:
    """A column or fact name for people: durations say their unit in the value.

    >>> _label("longest_wait_seconds"), _label("application_name")
    ('longest wait', 'application')
    """
    return _LABELS.get(key) or key.removesuffix("_seconds").replace("_", " ")


def _plain(value: object) -> str:
    """A nested value as one line of text, leaving out what is empty.

    >>> _plain({"sessions": {"active": 1, "idle": 0}, "lock": None, "share": 0.33333})
    'sessions active 1, share 0.33'
    """
    if isinstance(value, Mapping):
        return ", ".join(
            f"{k} {_plain(v)}" for k, v in value.items() if v not in (None, "", 0, [], {})
        )
    if isinstance(value, list | tuple):
        return ", ".join(_plain(v) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{round(value, 2):g}"
    return str(value)


def _cell(key: str, value: object) -> str:
    if key.endswith("_seconds"):
        return _seconds(value)
    if key == "query" and value is not None:
        return f"<code>{_e(value)}</code>"
    if key == "subject" and isinstance(value, Mapping):
        return _e("/".join(str(v) for v in value.values() if v))
    return _e(None if value is None else _plain(value))


def _table(rows: Sequence[Mapping[str, Any]]) -> str:
    """A table of dicts: known columns first, in reading order; empty columns
    dropped; at most TABLE_ROWS rows, the rest counted."""
    keys: list[str] = [k for k in _LABELS if any(k in row for row in rows)]
    keys += sorted({k for row in rows for k in row} - set(keys) - _HIDDEN)
    keys = [k for k in keys if any(row.get(k) not in (None, [], "") for row in rows)]
    head = "".join(f"<th>{_e(_label(k))}</th>" for k in keys)
    body = "".join(
        "<tr>" + "".join(f"<td>{_cell(k, row.get(k))}</td>" for k in keys) + "</tr>"
        for row in rows[:TABLE_ROWS]
    )
    if len(rows) > TABLE_ROWS:
        body += f'<tr><td colspan="{len(keys)}">and {len(rows) - TABLE_ROWS} more</td></tr>'
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _chain(steps: Sequence[Mapping[str, Any]]) -> str:
    items = []
    for step in steps:
        who = f"pid {_e(step.get('pid'))} {_e(step.get('application_name') or '')}"
        state = step.get("state")
        doing = (
            f"{_e(state)} for {_seconds(step.get('state_seconds'))}" if state else "state unknown"
        )
        query = step.get("query")
        code = f" <code>{_e(query)}</code>" if query else ""
        cycle = " <strong>(back to the start: a cycle)</strong>" if step.get("cycle") else ""
        items.append(f"<li>{who.strip()}, {doing}{code}{cycle}</li>")
    return '<ol class="chain">' + "".join(items) + "</ol>"


def _evidence(evidence: Mapping[str, Any]) -> str:
    """Sessions as tables, the blocking chain as steps, everything else as a list of facts."""
    parts: list[str] = []
    facts: list[str] = []
    for key, value in evidence.items():
        if value in (None, [], {}, ""):
            continue
        title = _e(_label(key))
        if key == "chain":
            if len(value) > 1:
                parts.append(f"<h4>blocking chain</h4>{_chain(value)}")
        elif isinstance(value, list) and all(isinstance(v, Mapping) for v in value):
            parts.append(f"<h4>{title}</h4>{_table(value)}")
        elif isinstance(value, Mapping):
            parts.append(f"<h4>{title}</h4>{_evidence(value)}")
        else:
            facts.append(f"<div><dt>{title}</dt><dd>{_cell(key, value)}</dd></div>")
    if facts:
        parts.insert(0, '<dl class="facts">' + "".join(facts) + "</dl>")
    return "".join(parts)


def sparkline(
    points: Sequence[tuple[float, float]], window: float, width: int = 240, height: int = 36
) -> str:
    """An inline SVG line of (seconds ago, value), newest at the right, over
    the points' own span (a daemon started a minute ago has a minute to show)
    up to ``window`` seconds."""
    span = min(max((ago for ago, _ in points), default=0.0), window) or window
    top = max((value for _, value in points), default=0.0)
    scale = max(top, 1.0)
    coords = " ".join(
        f"{width * (1 - min(ago, span) / span):.1f},{height - 2 - (height - 4) * value / scale:.1f}"
        for ago, value in points
    )
    last = points[-1][1] if points else 0.0
    label = f"last {format_duration(span)}: now {last:g}, highest {top:g}"
    return (
        f'<svg class="chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{_e(label)}"><title>{_e(label)}</title>'
        f'<line x1="0" y1="{height - 1}" x2="{width}" y2="{height - 1}" class="axis"/>'
        + (f'<polyline points="{coords}"/>' if len(points) > 1 else "")
        + "</svg>"
    )


# ---------------------------------------------------------------------------
# Sections


def _findings_section(page: Page) -> str:
    if not page.findings:
        return '<section id="findings"><h2>Findings</h2><p class="ok">Nothing is wrong right now.</p></section>'
    articles = []
    shown: set[tuple[str, str]] = set()
    for finding in page.findings:
        subject = "/".join(v for v in finding["subject"].values() if v) or "—"
        severity = finding["severity"]
        # Findings about one subject share most of their evidence: it is
        # open under the first (the most severe) and folded under the others.
        first = (finding["target"], subject) not in shown
        shown.add((finding["target"], subject))
        articles.append(
            f'<article class="finding {_e(severity)}">'
            f'<h3><span class="badge">{_e(severity)}</span> {_e(finding["kind"])} '
            f'<span class="where">{_e(finding["target"])} · {_e(subject)}</span></h3>'
            f'<p class="summary">{_e(finding["summary"])}</p>'
            f'<p class="since">since {_moment(page.now, finding["since"])}</p>'
            f"<details{' open' if first else ''}><summary>evidence</summary>"
            f"{_evidence(finding['evidence'])}</details>"
            "</article>"
        )
    return f'<section id="findings"><h2>Findings ({len(page.findings)})</h2>{"".join(articles)}</section>'


def _locks_section(page: Page) -> str:
    blocks = []
    for view in page.views:
        entry = page.locks.get(view.target.name) or {}
        shown = entry.get("locks") or []
        if not view.up:
            body = "<p>not sampled: the target is down</p>"
        elif not shown:
            body = "<p>no advisory locks held or awaited</p>"
        else:
            rows = []
            for lock in shown:
                holders = _table(lock["holders"]) if lock["holders"] else "<p>nobody holds it</p>"
                waiters = (
                    f"<h4>{len(lock['waiters'])} waiting, the longest for "
                    f"{_seconds(lock['longest_wait_seconds'])}</h4>{_table(lock['waiters'])}"
                    if lock["waiters"]
                    else ""
                )
                rows.append(
                    '<div class="lock">'
                    f'<h4>lock {_e(lock["lock"])} <span class="where">in {_e(lock["database"])}, '
                    f"{_e(lock['mode'])}, held for {_seconds(lock['hold_seconds'])}</span></h4>"
                    f"{holders}{waiters}</div>"
                )
            body = "".join(rows)
            left_out = entry.get("locks_left_out") or 0
            if left_out:
                body += (
                    f'<p>and {_e(left_out)} more, held for less long: all are in <a href="/api/v1/locks">'
                    "/api/v1/locks</a></p>"
                )
        blocks.append(f"<h3>{_e(view.target.name)}</h3>{body}")
    return f'<section id="locks"><h2>Advisory locks now</h2>{"".join(blocks)}</section>'


def _targets_section(page: Page) -> str:
    rows = []
    for view in page.views:
        status = view.status
        snapshot = None if status is None else status.snapshot
        state = "waiting for the first poll" if status is None else ("up" if view.up else "down")
        error = (
            ""
            if status is None or status.error is None
            else f"<br><small>{_e(status.error)}</small>"
        )
        chart = sparkline(page.history.points(view.target.name, WAITING), page.history.window)
        rows.append(
            f'<tr class="{"up" if view.up else "down"}"><td>{_e(view.target.name)}</td>'
            f"<td>{_e(state)}{error}</td>"
            f"<td>{_moment(page.now, iso_utc(view.last_success))}</td>"
            f"<td>{_e(None if snapshot is None else f'{snapshot.poll_seconds * 1000:.0f} ms')}</td>"
            f"<td>{view.polls_total}</td><td>{view.poll_errors_total}</td>"
            f"<td>{view.state_write_errors_total}</td><td>{chart}</td></tr>"
        )
    head = (
        "<tr><th>target</th><th>state</th><th>last successful poll</th><th>poll took</th>"
        "<th>polls</th><th>failed</th><th>state saves failed</th>"
        "<th>waiting on advisory locks, up to the last hour</th></tr>"
    )
    return (
        '<section id="targets"><h2>Targets</h2>'
        f"<table><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table></section>"
    )


def _percent_of_a_core(cores: object) -> str:
    if isinstance(cores, int | float) and not isinstance(cores, bool):
        return _e(f"{cores * 100:.0f}% of a core")
    return _e(None)


def _queue_rows(page: Page, target: str, queues: list[dict[str, Any]]) -> str:
    rows = []
    for queue in queues:
        growth = queue["growth_per_second"]
        chart = sparkline(
            page.history.points(target, queue_series(queue["name"])), page.history.window
        )
        rows.append(
            f"<tr><td>{_e(queue['name'])}</td><td>{_e(queue['depth'])}</td>"
            f"<td>{_seconds(queue['oldest_age_seconds'])}</td><td>{_e(queue['in_flight'])}</td>"
            f"<td>{_e(None if growth is None else f'{growth:+.2f}/s')}</td>"
            f"<td>{_e(', '.join(queue['workers']))}</td><td>{chart}</td></tr>"
        )
    return (
        "<table><thead><tr><th>queue</th><th>pending</th><th>oldest</th><th>in flight</th>"
        "<th>growth</th><th>workers</th><th>pending, up to the last hour</th></tr></thead>"
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
            f"<tr><td>{_e(group['name'])}</td><td>{_e(', '.join(group['queues']))}</td>"
            f"<td>{_e(group['processes'])}</td><td>{_percent_of_a_core(group['cpu_cores'])}</td>"
            f"<td>{_e(sessions or None)}</td><td>{_e(waits or None)}</td></tr>"
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
                f"<h3>{_e(view.target.name)}</h3>"
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
            runs = _table(
                [
                    {
                        "run_key": run["run_key"],
                        "started": _moment_text(page.now, run["started_at"]),
                        "finished": _moment_text(page.now, run["finished_at"]),
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
                f'<div class="job"><h4>{_e(job["name"])} <span class="where">'
                f"{_e(job['source'])}; {_e(job['starts_total'])} start(s), "
                f"{_e(duplicates)} duplicate(s), {_e(job['running'])} running; last success "
                f"{_moment(page.now, job['last_success'])}, last run took "
                f"{_seconds(job['last_duration_seconds'])}</span></h4>"
                f"{runs if job['recent_runs'] else '<p>no runs seen yet</p>'}</div>"
            )
        blocks.append(f"<h3>{_e(view.target.name)}</h3>{''.join(rows)}")
    if not blocks:
        return ""
    return f'<section id="jobs"><h2>Jobs</h2>{"".join(blocks)}</section>'


# The page, top to bottom.
SECTIONS: tuple[Callable[[Page], str], ...] = (
    _findings_section,
    _locks_section,
    _queues_section,
    _jobs_section,
    _targets_section,
)

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2330;background:#f4f5f7}
header{padding:12px 20px;color:#fff;background:#2b6e3f}
header.bad{background:#a4262c}
header h1{margin:0;font-size:20px;display:inline}
header span{margin-left:16px}
main{padding:4px 20px 20px}
section{background:#fff;border-radius:6px;padding:8px 16px 12px;margin:12px 0}
h2{font-size:17px;margin:6px 0}h3{font-size:15px;margin:10px 0 4px}h4{font-size:13px;margin:8px 0 2px}
table{border-collapse:collapse;margin:4px 0}
th,td{text-align:left;padding:2px 8px;border-bottom:1px solid #e2e4e8;vertical-align:top}
th{font-weight:600;color:#505a6b}
code{font-size:12px;background:#f0f1f3;padding:0 3px;white-space:pre-wrap;word-break:break-all}
.finding{border-left:5px solid #d08a00;padding:2px 12px;margin:10px 0}
.finding.critical{border-color:#a4262c}.finding.info{border-color:#3a6fb0}
.badge{font-size:11px;text-transform:uppercase;padding:1px 6px;border-radius:3px;background:#d08a00;color:#fff}
.critical .badge{background:#a4262c}.info .badge{background:#3a6fb0}
.where,.since{color:#505a6b;font-weight:normal}
.summary{font-weight:600;margin:4px 0}
.facts{display:flex;flex-wrap:wrap;gap:2px 20px;margin:4px 0}.facts div{display:flex;gap:6px}
.facts dt{color:#505a6b}.facts dd{margin:0}
.chain li{margin:2px 0}
.lock{margin:6px 0 12px}
tr.down td:first-child{color:#a4262c;font-weight:600}
.ok{color:#2b6e3f;font-weight:600}
svg.chart polyline{fill:none;stroke:#a4262c;stroke-width:1.5}
svg.chart .axis{stroke:#c7cbd3}
footer{padding:0 20px 20px;color:#505a6b}
"""


def _refresh_seconds(views: Iterable[TargetView]) -> int:
    intervals = [view.target.interval for view in views]
    low, high = REFRESH_BOUNDS
    return round(min(max(min(intervals, default=high), low), high))


def render_page(page: Page) -> str:
    count = len(page.findings)
    down = sum(1 for view in page.views if view.status is not None and not view.up)
    headline = f"{count} active finding{'s' if count != 1 else ''}" if count else "all clear"
    if down:
        headline += f", {down} target{'s' if down != 1 else ''} down"
    refresh = _refresh_seconds(page.views)
    stamp = iso_utc(page.now) or ""
    body = "".join(section(page) for section in SECTIONS)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{refresh}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(f"lockwatch: {headline}")}</title>
<style>{_STYLE}</style></head>
<body>
<header class="{"bad" if count or down else "good"}"><h1>lockwatch</h1><span id="headline">{_e(headline)}</span>
<span>updated {_e(stamp.replace("T", " ").replace("Z", " UTC"))}, every {refresh}s</span></header>
<main>{body}</main>
<footer>lockwatch {_e(lockwatch.__version__)} ·
<a href="/metrics">/metrics</a> ·
<a href="/api/v1/findings">/api/v1/findings</a> ·
<a href="/api/v1/locks">/api/v1/locks</a> ·
<a href="/healthz">/healthz</a></footer>
</body></html>
"""

"""The status page's advisory locks: the first DETAILED_TARGETS targets'
locks one by one (those with open incidents first, then findings, then down),
every target's counts in one cell of the targets table; the API has the rest.

A fleet of 300 targets made a page of 7.5 MB when every target's locks were
shown one by one; now the page grows by one row per target."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlencode

from lockwatch.model.incidents import Incident
from lockwatch.publish.api.locks import history_text, lock_counts
from lockwatch.publish.status.cells import escape, seconds_text, table
from lockwatch.state.target_view import TargetView

LOCKS_SHOWN = 20  # per target, longest-held first; /api/v1/locks pages through all
DETAILED_TARGETS = 10  # targets whose locks are shown one by one; the rest are counted


def locks_url(target: str, offset: int = 0) -> str:
    """The target's locks in the API, from ``offset``.

    >>> locks_url("db 1&2", 20)
    '/api/v1/locks?target=db+1%262&offset=20'
    """
    query = {"target": target, **({"offset": str(offset)} if offset else {})}
    return f"/api/v1/locks?{urlencode(query)}"


def detailed_targets(
    views: Iterable[TargetView], incidents: Sequence[Incident]
) -> tuple[TargetView, ...]:
    """The targets whose locks the page shows one by one: those with open
    incidents (worst first), then with findings, then down, then the rest,
    each group by name; at most DETAILED_TARGETS."""
    worst: dict[str, int] = {}
    for rank, incident in enumerate(incidents):  # worst first
        worst.setdefault(incident.target, rank)

    def order(view: TargetView) -> tuple[int, int, str]:
        name = view.target.name
        if name in worst:
            return (0, worst[name], name)
        down = view.status is not None and not view.up
        return (1 if view.findings else 2 if down else 3, 0, name)

    return tuple(sorted(views, key=order)[:DETAILED_TARGETS])


def counts(view: TargetView) -> tuple[int, int] | None:
    """(held, waiting) advisory lock rows of the target's last poll, not
    counting ignored keys; None without a poll result."""
    snapshot = None if view.status is None else view.status.snapshot
    if snapshot is None:
        return None
    found = lock_counts(snapshot, view.target.locks).values()
    return (sum(held for held, _ in found), sum(waiting for _, waiting in found))


def counts_cell(view: TargetView) -> str:
    """The targets table's cell: the target's counts, linked to its locks in the API."""
    found = counts(view)
    if found is None:
        return escape(None)
    held, waiting = found
    return f'<a href="{escape(locks_url(view.target.name))}">{held} held, {waiting} waiting</a>'


def _lock_block(lock: dict[str, Any], roots: dict[object, str]) -> str:
    holders = table(lock["holders"]) if lock["holders"] else "<p>nobody holds it</p>"
    # Every waiter waits on the holder marked above them: no "blocked by" column.
    waiting = [{k: v for k, v in w.items() if k != "blocked_by"} for w in lock["waiters"]]
    waiters = (
        f"<h4>{len(waiting)} waiting, the longest for "
        f"{seconds_text(lock['longest_wait_seconds'])}</h4>{table(waiting)}"
        if waiting
        else ""
    )
    marks = "".join(
        f'<p class="root"><strong class="mark">root</strong> held by pid '
        f'{escape(h["pid"])}, the root of <a href="#incident-{escape(roots[h["pid"]])}">'
        f"incident {escape(roots[h['pid']])}</a></p>"
        for h in lock["holders"]
        if h.get("pid") in roots
    )
    return (
        '<div class="lock">'
        f'<h4>lock {escape(lock["lock"])} <span class="where">in {escape(lock["database"])}, '
        f"{escape(lock['mode'])}, held for {seconds_text(lock['hold_seconds'])}"
        f"{escape(history_text(lock))}</span></h4>"
        f"{marks}{holders}{waiters}</div>"
    )


def _tree_item(node: dict[str, Any], roots: dict[object, str]) -> str:
    """One session of a lock tree and, nested under it, who waits on it."""
    wait = node.get("wait")
    parts = [f"pid {escape(node['pid'])} {escape(node.get('application_name') or '')}"]
    if node.get("pid") in roots:
        incident = escape(roots[node["pid"]])
        parts.insert(0, f'<a class="mark" href="#incident-{incident}">root</a>')
    if wait is None:
        parts.append(
            f"{escape(node.get('state'))}, transaction open "
            f"{seconds_text(node.get('xact_seconds'))}"
        )
    else:
        blockers = ", ".join(str(pid) for pid in wait["blocked_by"])
        parts.append(
            f"wants {escape(wait['mode'])} on {escape(wait['locktype'])} "
            f"{escape(wait['relation'] or '')} for {seconds_text(wait['wait_seconds'])} "
            f"(blocked by {escape(blockers)})"
        )
    if node.get("query"):
        parts.append(f"<code>{escape(node['query'])}</code>")
    under = "".join(_tree_item(child, roots) for child in node["waiters"])
    left = node.get("waiters_left_out") or 0
    if left:
        under += f"<li>and {escape(left)} more waiting</li>"
    return f"<li>{' · '.join(parts)}{f'<ul>{under}</ul>' if under else ''}</li>"


def _trees_block(entry: dict[str, Any], roots: dict[object, str]) -> str:
    trees = entry.get("lock_trees") or []
    if not trees:
        return ""
    items = "".join(_tree_item(tree, roots) for tree in trees)
    return f'<h4>waits on relations, rows and transactions, root first</h4><ul class="tree">{items}</ul>'


def _target_block(view: TargetView, entry: dict[str, Any], roots: dict[object, str]) -> str:
    shown = entry.get("locks") or []
    if not view.up:
        body = "<p>not sampled: the target is down</p>"
    elif not shown:
        body = "<p>no advisory locks held or awaited</p>"
    else:
        body = "".join(_lock_block(lock, roots) for lock in shown)
        left_out = entry.get("locks_left_out") or 0
        if left_out:
            # The API's next page starts where the page stops.
            more = escape(locks_url(view.target.name, LOCKS_SHOWN))
            body += (
                f"<p>and {escape(left_out)} more, held for less long: page through them at "
                f'<a href="{more}">{more}</a></p>'
            )
    return f"<h3>{escape(view.target.name)}</h3>{body}{_trees_block(entry, roots)}"


def locks_section(
    views: Sequence[TargetView],
    detailed: Sequence[TargetView],
    locks: dict[str, dict[str, Any]],
    incidents: Sequence[Incident],
) -> str:
    """``detailed`` targets' locks one by one (``locks``: their entries in
    /api/v1/locks), and how many of every other target's there are."""
    blocks = []
    for view in detailed:
        name = view.target.name
        roots: dict[object, str] = {
            incident.root.pid: incident.id
            for incident in incidents
            if incident.target == name and incident.root.pid is not None
        }
        blocks.append(_target_block(view, locks.get(name) or {}, roots))
    shown = {view.target.name for view in detailed}
    others = [view for view in views if view.target.name not in shown]
    if others:
        found = [c for c in (counts(view) for view in others) if c is not None]
        held, waiting = sum(c[0] for c in found), sum(c[1] for c in found)
        blocks.append(
            f"<p>and {len(others)} more targets, {held} held and {waiting} waiting between "
            "them: each one's count, linked to its locks in /api/v1/locks, is in the "
            '<a href="#targets">targets table</a></p>'
        )
    return f'<section id="locks"><h2>Advisory locks now</h2>{"".join(blocks)}</section>'

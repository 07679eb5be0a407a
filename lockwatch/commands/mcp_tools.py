"""What ``lockwatch mcp``'s tools answer, read from a running lockwatch's API:
every tool only reads, and none can write, notify or end anything (ending an
incident's root is ``lockwatch terminate``, for a person, with --yes).

Kept apart from the MCP SDK (``commands/mcp_server.py``), which is an
optional extra: these are plain functions of an ``ApiClient``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lockwatch.commands.api_client import ApiClient, ApiError
from lockwatch.model.incident_explain import explain
from lockwatch.model.incidents import load_incident

TREE_DEPTH = 8  # levels of waiters below a holder shown; deeper is counted
SessionNode = dict[str, Any]


def incidents(
    client: ApiClient,
    state: str | None = None,
    target: str | None = None,
    kind: str | None = None,
    since: str | None = None,
    limit: int = 20,
) -> dict[str, Any]:
    """Open and recently resolved incidents, worst and newest first."""
    given = {"state": state, "target": target, "kind": kind, "since": since}
    params = {name: value for name, value in given.items() if value}
    params["limit"] = str(max(1, min(limit, 500)))
    return client.get("/api/v1/incidents", params)


def incident(client: ApiClient, incident_id: str) -> dict[str, Any]:
    """One incident whole: root, findings with evidence, timeline, impact, next step."""
    return client.incident(incident_id)


def explain_incident(client: ApiClient, incident_id: str) -> str:
    """The incident explained by lockwatch from its evidence."""
    found = load_incident(client.incident(incident_id))
    if found is None:
        raise ApiError(f"incident {incident_id!r} is not in a shape this lockwatch reads")
    return explain(found)


def queues(client: ApiClient) -> dict[str, Any]:
    return client.get("/api/v1/queues")


def jobs(client: ApiClient) -> dict[str, Any]:
    return client.get("/api/v1/jobs")


def lock_tree(client: ApiClient, target: str | None = None) -> dict[str, Any]:
    """The advisory locks now as trees: each holder that waits on nothing, what
    it holds, and the sessions waiting on it, and on them, in turn."""
    document = client.get("/api/v1/locks")
    return {
        "targets": [
            {
                "target": entry["target"],
                "up": entry["up"],
                "checked_at": entry["checked_at"],
                "tree": tree(entry["locks"]),
                "locks_left_out": entry.get("locks_left_out", 0),
            }
            for entry in document["targets"]
            if target in (None, entry["target"])
        ]
    }


def tree(locks: Iterable[dict[str, Any]]) -> list[SessionNode]:
    """The sessions of a target's lock entries (``/api/v1/locks``) as trees:
    a holder is a root when it waits on nothing; a waiter hangs below the
    holders it is blocked by (or every holder of its lock). A session in a
    cycle of waits is shown once, where it is met first.

    >>> locks = [{"database": "app", "lock": "42", "holders": [{"pid": 1, "held_seconds": 9.0}],
    ...           "waiters": [{"pid": 2, "wait_seconds": 5.0, "blocked_by": [1]}]}]
    >>> [(n["pid"], [c["pid"] for c in n["blocked"]]) for n in tree(locks)]
    [(1, [2])]
    """
    sessions: dict[int, SessionNode] = {}
    below: dict[int, list[int]] = {}
    waiting: set[int] = set()
    for entry in locks:
        label = f"{entry['database']}/{entry['lock']}"
        holders = [h["pid"] for h in entry["holders"]]
        for holder in entry["holders"]:
            node = sessions.setdefault(holder["pid"], _node(holder))
            node["holds"].append({"lock": label, "held_seconds": holder.get("held_seconds")})
        for waiter in entry["waiters"]:
            node = sessions.setdefault(waiter["pid"], _node(waiter))
            node["waits_for"] = {"lock": label, "wait_seconds": waiter.get("wait_seconds")}
            waiting.add(waiter["pid"])
            for holder_pid in waiter.get("blocked_by") or holders:
                below.setdefault(holder_pid, []).append(waiter["pid"])
    roots = [pid for pid in sessions if pid not in waiting]
    # Sessions that all wait on each other have no root: each cycle shows from its first.
    roots += [pid for pid in sessions if pid in waiting and not _reached(roots, below, pid)]
    shown: set[int] = set()
    return [_grown(pid, sessions, below, shown, 0) for pid in roots if pid not in shown]


def _node(session: dict[str, Any]) -> SessionNode:
    facts = ("pid", "application_name", "client_addr", "state", "state_seconds", "query")
    node = {name: session.get(name) for name in facts}
    return {**node, "holds": [], "waits_for": None, "blocked": []}


def _reached(roots: list[int], below: dict[int, list[int]], pid: int) -> bool:
    seen, todo = set(roots), list(roots)
    while todo:
        for child in below.get(todo.pop(), []):
            if child == pid:
                return True
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return False


def _grown(
    pid: int,
    sessions: dict[int, SessionNode],
    below: dict[int, list[int]],
    shown: set[int],
    depth: int,
) -> SessionNode:
    shown.add(pid)
    node = dict(sessions[pid])
    children = [c for c in dict.fromkeys(below.get(pid, [])) if c not in shown]
    if depth >= TREE_DEPTH:
        node["blocked"], node["more_blocked"] = [], len(children)
        return node
    node["blocked"] = [_grown(child, sessions, below, shown, depth + 1) for child in children]
    return node

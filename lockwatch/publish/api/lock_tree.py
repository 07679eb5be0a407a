"""The lock trees of a target's waits on locks of other locktypes than
advisory, as ``/api/v1/locks`` and ``lockwatch snapshot --json`` serve them:
each root first (a session others wait on that waits on nothing), who waits
on it under it, every waiter's blockers named, a bounded number of sessions."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from lockwatch.model.lock_waits import LockTreeNode, LockWait, lock_forest
from lockwatch.model.locks import HIDDEN, Backend, LockSnapshot

TREE_SESSIONS = 200  # sessions a target's trees list; the rest are counted


def _seconds(now: datetime, since: datetime | None) -> float | None:
    return None if since is None else round(max(0.0, (now - since).total_seconds()), 3)


def _session(pid: int, backend: Backend | None, now: datetime) -> dict[str, Any]:
    if backend is None:
        return {"pid": pid, "seen": False}
    shown = backend.visible
    return {
        "pid": pid,
        "seen": True,
        "application_name": backend.application_name,
        "client_addr": backend.client_addr if shown else HIDDEN,
        "client_port": backend.client_port if shown else None,
        "state": backend.state if shown else HIDDEN,
        "xact_seconds": _seconds(now, backend.xact_start) if shown else None,
        "query": backend.query if shown else HIDDEN,
    }


def _wait(wait: LockWait | None, now: datetime) -> dict[str, Any] | None:
    if wait is None:
        return None
    return {
        "locktype": wait.locktype,
        "mode": wait.mode,
        "relation": wait.relation,
        "wait_seconds": _seconds(now, wait.wait_start),
        "blocked_by": list(wait.blockers),
    }


def lock_tree_entries(snapshot: LockSnapshot, now: datetime) -> list[dict[str, Any]]:
    """The snapshot's lock trees, the largest first, TREE_SESSIONS sessions
    at most; a session's ``waiters_left_out`` counts what was cut under it."""
    budget = [TREE_SESSIONS]

    def entry(node: LockTreeNode) -> dict[str, Any]:
        budget[0] -= 1
        listed, listed_size = [], 0
        for child in node.waiters:
            if budget[0] <= 0:
                break
            listed.append(entry(child))
            listed_size += child.size
        return {
            **_session(node.pid, snapshot.backends.get(node.pid), now),
            "wait": _wait(node.wait, now),
            "waiters": listed,
            # The subtrees of the waiters not listed here (a listed one counts its own).
            "waiters_left_out": node.size - 1 - listed_size,
        }

    trees = []
    for tree in lock_forest(snapshot.waits):
        if budget[0] <= 0:
            break
        trees.append(entry(tree))
    return trees

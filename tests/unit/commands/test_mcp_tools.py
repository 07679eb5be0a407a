"""The locks as trees, from ``/api/v1/locks`` entries: chains hang below their
holder, and sessions that wait on each other are each shown once."""

from __future__ import annotations

from typing import Any

from lockwatch.commands.mcp_tools import tree


def lock(key: str, holders: list[int], waiters: dict[int, list[int]]) -> dict[str, Any]:
    return {
        "database": "app",
        "lock": key,
        "holders": [{"pid": pid, "held_seconds": 5.0} for pid in holders],
        "waiters": [
            {"pid": pid, "wait_seconds": 1.0, "blocked_by": by} for pid, by in waiters.items()
        ],
    }


def shape(node: dict[str, Any]) -> tuple[int, list[Any]]:
    return node["pid"], [shape(child) for child in node["blocked"]]


def test_a_chain_hangs_below_the_holder_that_waits_on_nothing() -> None:
    locks = [lock("1", [10], {20: [10], 21: [10]}), lock("2", [20], {30: [20]})]
    assert [shape(n) for n in tree(locks)] == [(10, [(20, [(30, [])]), (21, [])])]


def test_a_waiter_without_blocked_by_hangs_below_every_holder_of_its_lock() -> None:
    (root,) = tree([lock("1", [10], {20: []})])
    assert shape(root) == (10, [(20, [])])
    assert root["blocked"][0]["waits_for"] == {"lock": "app/1", "wait_seconds": 1.0}


def test_sessions_that_wait_on_each_other_are_shown_once() -> None:
    locks = [lock("1", [10], {20: [10]}), lock("2", [20], {10: [20]})]
    shown = tree(locks)
    assert [shape(n) for n in shown] == [(10, [(20, [])])]

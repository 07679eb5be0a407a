"""One poll is three steps (issue 31 items 2 and 5): every read first (the
locks, the liveness of the sessions at the root of open incidents, a
serverless server's other clients), then a judgement that makes no database
call and asks no book for its own state, then the apply step. Told on a real
server by a session that records each network step of the poll in order."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from lockwatch.model.incidents import Resolution
from lockwatch.runner import TargetRunner
from lockwatch.settings.locks import LockSettings
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from tests.fixtures.postgres import PgDatabase, wait_until

pytestmark = pytest.mark.pg

POLL = "a poll begins"
JUDGE = "judgement begins"


def polls_of(calls: list[str]) -> list[list[str]]:
    """The calls of each poll, from its start to the next poll's."""
    starts = [i for i, call in enumerate(calls) if call == POLL]
    return [calls[a + 1 : b] for a, b in zip(starts, [*starts[1:], len(calls)], strict=True)]


def recording(runner: TargetRunner) -> list[str]:
    """What the runner's poll does, in order: each database step by what it
    is, each question to the incident book, and where judgement begins."""
    calls: list[str] = []
    session, book = runner.session, runner.incidents
    step, judge, roots = session.step, runner._judge, book.finding_roots

    @contextlib.contextmanager
    def recorded_step(what: str = "poll query", *args: Any, **kwargs: Any) -> Iterator[Any]:
        calls.append(f"db: {what}")
        with step(what, *args, **kwargs) as conn:
            yield conn

    def recorded(name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def record(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return call(*args, **kwargs)

        return record

    session.step = recorded_step  # type: ignore[method-assign]
    runner.poll_once = recorded(POLL, runner.poll_once)  # type: ignore[method-assign]
    runner._judge = recorded(JUDGE, judge)  # type: ignore[method-assign]
    book.finding_roots = recorded("book: finding roots", roots)  # type: ignore[method-assign]
    return calls


def test_a_poll_reads_everything_before_it_judges_and_nothing_after(pg: PgDatabase) -> None:
    target = Target(
        "main", pg.monitor_dsn, interval=0.1, locks=LockSettings(max_hold=0.3), serverless=True
    )
    runner = TargetRunner(target, Board(), StateStore(None))
    calls = recording(runner)
    holder = pg.connect("billing-worker")
    holder.execute("SELECT pg_advisory_lock(42)")
    pid = holder.info.backend_pid
    try:
        wait_until(lambda: runner.poll_once().incidents != (), message="the long hold opens one")
        with pg.connect("admin") as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        calls.clear()
        wait_until(lambda: runner.poll_once().incidents == (), message="it resolves")
    finally:
        runner.session.close()

    # The poll that told the incident ended read the session's liveness (the
    # holder is gone from the locks) and the server's other clients first.
    (resolved,) = runner.incidents.recent
    assert resolved.resolution is Resolution.SESSION_ENDED
    polls = polls_of(calls)
    last = polls[-1]
    assert last[-1] == JUDGE, f"a call after judgement began: {last}"
    assert last.count("db: query") >= 2, last  # the liveness and the serverless look
    assert "book: finding roots" in last, last
    # Every poll: no database call, no question to the book, once judgement began.
    for poll in polls:
        assert JUDGE in poll and poll[-1] == JUDGE, poll

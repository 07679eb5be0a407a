"""How a holder's incident ended, told on a real server: the holder let go of
its locks while its session goes on, or its session ended (terminated, or its
client gone) and took the locks with it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from lockwatch.model.incidents import Incident, Resolution
from lockwatch.runner import TargetRunner
from lockwatch.settings.locks import LockSettings
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from tests.fixtures.postgres import PgDatabase, session_alive, wait_until

pytestmark = pytest.mark.pg

BUDGET = 0.3  # max_hold: a lock held longer is an incident
Session = psycopg.Connection[tuple[Any, ...]]


def ended(pg: PgDatabase, end_it: Callable[[Session, int], None]) -> Incident:
    """A holder past its budget, then ``end_it(holder, its pid)``: the incident
    it was, once resolved."""
    runner = TargetRunner(
        Target("main", pg.monitor_dsn, interval=0.1, locks=LockSettings(max_hold=BUDGET)),
        Board(),
        StateStore(None),
    )
    holder = pg.connect("billing-worker")
    holder.execute("SELECT pg_advisory_lock(42)")
    pid = holder.info.backend_pid
    try:
        wait_until(lambda: runner.poll_once().incidents != (), message="the long hold opens one")
        (incident,) = runner.poll_once().incidents
        assert incident.root.pid == pid
        end_it(holder, pid)
        wait_until(lambda: runner.poll_once().incidents == (), message="it resolves")
        (resolved,) = runner.incidents.recent
        assert resolved.id == incident.id
        return resolved
    finally:
        runner.session.close()


def unlock(holder: Session, pid: int) -> None:
    holder.execute("SELECT pg_advisory_unlock(42)")


def terminate(pg: PgDatabase) -> Callable[[Session, int], None]:
    def end_it(holder: Session, pid: int) -> None:
        with pg.connect("admin") as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        # Until its exit is done: a backend lets go of its locks before it
        # leaves pg_stat_activity, and a poll in between (seen once, on a
        # loaded machine) finds the locks gone and the session still there.
        wait_until(
            lambda: not session_alive(pg.admin_dsn, pid),
            message="the terminated session gone from pg_stat_activity",
        )

    return end_it


def test_a_holder_that_lets_go_and_stays_connected_released_its_locks(pg: PgDatabase) -> None:
    released = ended(pg, unlock)
    assert released.resolution is Resolution.RELEASED
    assert "its session goes on" in released.timeline[-1].detail


def test_a_holder_whose_session_was_ended_is_told_so(pg: PgDatabase) -> None:
    gone = ended(pg, terminate(pg))
    assert gone.resolution is Resolution.SESSION_ENDED
    assert "session ended" in gone.timeline[-1].detail

"""The daemon's main loop wakes up once a second at most, or as a poll step
in progress reaches its limit, so a hung step is broken on time without the
process waking up many times a second beside the database."""

from __future__ import annotations

import pytest

from lockwatch.daemon import PAST_LIMIT, WATCHDOG_TICK, Daemon
from lockwatch.settings.targets import Settings, Target


def test_the_main_loop_looks_again_as_a_step_in_progress_reaches_its_limit() -> None:
    target = Target("main", "postgresql://nobody@127.0.0.1:9/none", statement_timeout=2.0)
    daemon = Daemon(Settings((target,), listen="127.0.0.1:0"))
    session = daemon.runners[0].session
    limit = session.step_limit
    assert limit > WATCHDOG_TICK

    assert daemon._next_look(100.0) == WATCHDOG_TICK  # no step: none can hang sooner
    session.busy_since = 100.0 - limit + 0.5  # half a second before its limit
    assert daemon._next_look(100.0) == pytest.approx(0.5 + PAST_LIMIT)
    session.busy_since = 100.0 - limit - 3.0  # past it (the watchdog breaks it now)
    assert daemon._next_look(100.0) == PAST_LIMIT
    session.busy_since = 100.0 - limit
    assert session.overdue(100.0 + PAST_LIMIT)  # what the loop finds when it looks

"""Teaching a learned budget (``max_hold: auto``) to wait: holds lengthened
step by step, each just under the budget the ones before taught. It rose
9.5 s -> 52 s -> 315 s in 15 holds with no finding at any step."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.battery.conftest import Record
from tests.fixtures.postgres import PgDatabase, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config

pytestmark = [pytest.mark.pg, pytest.mark.slow]

KEY = 4242
# Seconds of a learning period: the 1.8 s hold, begun as the first period
# ends, must end within the second (with 4 s that left under a second for the
# polls and the test to see the hold begin and end, and two CPU burners took
# it), and the 3.5 s hold after it past the second's end (at least 5.3 s on).
PERIOD = 5.0
CEILING = 3.0
LOOK_EVERY = 0.1  # seconds between looks at the findings: five a poll (write_config's 500 ms)
LOCKS = (
    "{max_hold: auto, orphan_after: 1h, convoy_waiters: 2, convoy_wait: 1s, "
    f"learning: {{period: {PERIOD:g}s, min_holds: 3, factor: 2, floor: 500ms, "
    f"ceiling: {CEILING:g}s}}}}"
)


def too_long(lockwatch: LockwatchProcess) -> dict[str, Any] | None:
    for finding in lockwatch.findings():
        if finding["kind"] == "lock_held_too_long" and str(KEY) in finding["summary"]:
            return finding
    return None


def test_holds_lengthened_step_by_step_meet_a_budget_that_does_not_follow_them(
    tmp_path: Path, battery_db: PgDatabase, battery: Record
) -> None:
    port = free_port()
    config = write_config(tmp_path, port, {"main": battery_db.monitor_dsn}, locks=LOCKS)
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    holder = battery_db.connect("teacher")
    lockwatch.start()

    released: list[float] = []  # when the test saw lockwatch see each hold end

    def hold(seconds: float) -> dict[str, Any] | None:
        """Hold the key ``seconds`` (once lockwatch saw it); the finding, if one fired."""
        holder.execute("SELECT pg_advisory_lock(%s)", (KEY,))
        wait_until(lambda: lockwatch.locks("main"), message="the hold seen")
        until = time.monotonic() + seconds
        fired = None
        while time.monotonic() < until:  # held the whole time, told or not
            fired = fired or too_long(lockwatch)
            # A finding can change only at a poll: look a few times a poll, not
            # in a spin (which kept a core busy for the whole teaching).
            time.sleep(min(LOOK_EVERY, max(0.0, until - time.monotonic())))
        holder.execute("SELECT pg_advisory_unlock(%s)", (KEY,))
        wait_until(lambda: not lockwatch.locks("main"), message="the release seen")
        released.append(time.monotonic())
        return fired

    try:
        taught = [hold(1.0) for _ in range(3)]  # the usual hold: 1 s
        # lockwatch's first period began at the poll that saw the first hold end,
        # before the test saw it seen: on a busy machine well after the unlock.
        wait_until(lambda: time.monotonic() - released[0] > PERIOD, timeout=30)
        taught.append(hold(1.0))  # ends the first period: budget 2 x 1 s
        assert taught == [None] * 4
        steps = [1.8, 3.5, 7.0]  # each just under twice the one before
        fired = [hold(seconds) for seconds in steps]
    finally:
        lockwatch.stop()
    budgets = [None if f is None else f["evidence"]["max_hold_seconds"] for f in fired]
    assert fired[0] is None, fired[0]
    assert fired[1] is not None and fired[2] is not None, budgets
    assert max(b for b in budgets if b is not None) <= CEILING
    log = lockwatch.log()
    assert "lengthened fast" in log
    battery(
        "learned-budget",
        injected=(
            f"max_hold: auto (learning period {PERIOD:g} s, min_holds 3, factor 2, "
            f"ceiling {CEILING:g} s); "
            "4 holds of 1 s, then holds of 1.8 s, 3.5 s and 7 s, each just under twice "
            "the one before"
        ),
        did=(
            f"lock_held_too_long at the 3.5 s hold (budget {budgets[1]:.1f} s, learned at "
            f"the start of the period, not from the holds within it) and at the 7 s hold "
            f"(budget {budgets[2]:.1f} s: the ceiling); the rise logged ('lengthened fast')"
        ),
        intact="yes: the 1.8 s hold under the budget stayed quiet; no budget above the ceiling",
    )

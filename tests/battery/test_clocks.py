"""lockwatch's clock against the server's: one hour ahead, one hour behind,
and a wall clock that jumps two hours forward and back. Durations read from
server timestamps (state_change, waitstart) are measured against the server's
own clock; hold times lockwatch measures itself run on a monotonic clock."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from lockwatch.model.findings import Finding
from lockwatch.runner import TargetRunner
from lockwatch.settings.locks import LockSettings
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from lockwatch.state.target_view import TargetView
from tests.battery.conftest import Record
from tests.fixtures.evidence import lock_of
from tests.fixtures.postgres import PgDatabase, queue_on_lock, run_in_thread, wait_until

pytestmark = [pytest.mark.pg, pytest.mark.slow]

BUDGET = 4.0  # seconds: every budget of the runners that must find it all
# The budgets of the runners that must invent nothing: far below the skews and
# jumps (an hour and more), so a clock mistaken for the server's still shows,
# and far above what setting up takes even when the machine stalls (a VM
# paused for 9 s, its wall clock stepped on at resume, made a 4 s budget's
# holder really idle past it before the first look).
PATIENT = 600.0
IDLE_KEY, ACTIVE_KEY = 42, 43
ALL = {"lock_convoy", "lock_held_too_long", "lock_orphaned"}


@dataclass
class WallClock:
    """lockwatch's wall clock: real time plus an offset the test sets (a skew or
    a jump); the monotonic clock stays real."""

    offset: timedelta = timedelta(0)

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset


@dataclass
class Runners:
    made: dict[str, tuple[TargetRunner, WallClock]] = field(default_factory=dict)
    last: dict[str, TargetView] = field(default_factory=dict)

    def poll(self, name: str) -> dict[tuple[str, str], Finding]:
        runner, _ = self.made[name]
        self.last[name] = view = runner.poll_once()
        return {(f.kind.value, lock_of(f) or ""): f for f in view.findings}

    def kinds(self, name: str, key: int) -> set[str]:
        return {kind for kind, lock in self.poll(name) if lock == str(key)}


def _runners(battery_db: PgDatabase, budget: float) -> Runners:
    """A runner 1 h ahead of the server, one 1 h behind and one jumping, with
    every budget ``budget``."""
    made = Runners()
    settings = LockSettings(
        max_hold=budget, orphan_after=budget, convoy_wait=budget, convoy_waiters=2
    )
    for name, offset in (("ahead", 1.0), ("behind", -1.0), ("jumping", 0.0)):
        clock = WallClock(timedelta(hours=offset))
        target = Target(name, battery_db.monitor_dsn, interval=1.0, locks=settings)
        made.made[name] = (TargetRunner(target, Board(), StateStore(None), clock), clock)
    return made


@pytest.fixture
def runners(battery_db: PgDatabase) -> Iterator[tuple[Runners, Runners]]:
    """The patient runners (nothing invented) and the quick ones (nothing hidden)."""
    both = (_runners(battery_db, PATIENT), _runners(battery_db, BUDGET))
    yield both
    for made in both:
        for runner, _ in made.made.values():
            runner.close()


def test_skewed_and_jumping_clocks_neither_invent_nor_hide_findings(
    battery_db: PgDatabase, runners: tuple[Runners, Runners], battery: Record
) -> None:
    patient, quick = runners
    began = time.monotonic()
    holder = battery_db.connect("idle-holder")
    holder.execute("SELECT pg_advisory_lock(%s)", (IDLE_KEY,))
    for n in range(2):
        queue_on_lock(battery_db.connect(f"waiter-{n}"), IDLE_KEY)
    busy = battery_db.connect("busy-holder")
    busy.execute("SELECT pg_advisory_lock(%s)", (ACTIVE_KEY,))
    run_in_thread(lambda: busy.execute("SELECT pg_sleep(60)"))  # ended with the database
    wait_until(lambda: patient.kinds("jumping", IDLE_KEY) == set() and _queued(patient))

    at_first = {name: patient.kinds(name, IDLE_KEY) for name in ("ahead", "behind")}
    clock = patient.made["jumping"][1]
    held_before = _held(patient, clock)
    clock.offset = timedelta(hours=2)
    jumped = patient.kinds("jumping", ACTIVE_KEY)
    held_ahead = _held(patient, clock)
    clock.offset = timedelta(0)
    back = patient.kinds("jumping", ACTIVE_KEY)
    held_back = _held(patient, clock)
    early = time.monotonic() - began
    assert early < PATIENT, "setting up took longer than the budgets: nothing is judged"
    assert at_first == {"ahead": set(), "behind": set()}, "a skew invented findings"
    assert (jumped, back) == (set(), set()), "a wall-clock jump invented a long hold"
    # The active holder's hold time goes on through the jumps (it restarted at each).
    assert held_before <= held_ahead <= held_back, (held_before, held_ahead, held_back)

    found = wait_until(
        lambda: _all_found(quick),
        timeout=BUDGET + 15,
        message="every runner sees the convoy, the long holds and the orphan",
    )
    battery(
        "clocks",
        injected=(
            "lockwatch's clock 1 h ahead of the server, 1 h behind, and one jumping +2 h "
            "and back; an idle holder with 2 waiters, an active holder; budgets "
            f"{PATIENT:.0f} s (nothing invented) and {BUDGET:.0f} s (nothing hidden)"
        ),
        did=(
            f"no finding under any clock in the first {early * 1000:.0f} ms at {PATIENT:.0f} s "
            "budgets, none through the jump; "
            f"the active holder's hold time {held_before:.2f} s before the jump, "
            f"{held_ahead:.2f} s after +2 h, {held_back:.2f} s after the jump back; "
            f"then {', '.join(sorted(ALL))} under each at {BUDGET:.0f} s budgets, "
            f"{time.monotonic() - began:.1f} s in"
        ),
        intact=f"yes: 0 findings invented, 0 hidden ({len(found)} runners agree)",
    )


def _held(runners: Runners, clock: WallClock) -> float:
    """Seconds the active holder has held its lock, as the jumping runner last saw."""
    status = runners.last["jumping"].status
    snapshot = status.snapshot if status else None
    assert snapshot is not None
    (lock,) = [lock for lock in snapshot.locks if lock.key.render() == str(ACTIVE_KEY)]
    assert lock.first_seen is not None
    return (clock() - lock.first_seen).total_seconds()


def _queued(runners: Runners) -> bool:
    status = runners.last["jumping"].status
    snapshot = status.snapshot if status else None
    return snapshot is not None and sum(not lock.granted for lock in snapshot.locks) == 2


def _all_found(runners: Runners) -> dict[str, set[str]] | None:
    found = {name: runners.kinds(name, IDLE_KEY) for name in runners.made}
    active = runners.kinds("jumping", ACTIVE_KEY)
    if all(kinds == ALL for kinds in found.values()) and "lock_held_too_long" in active:
        return found
    return None

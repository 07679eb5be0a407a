from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from lockwatch.model.locks import AdvisoryLock, Backend
from lockwatch.state.holds import HoldTracker
from tests.fixtures.snapshots import NOW, backend, held, waiting

GAP = 30.0


def later(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def lock(pid: int, key: int = 42, *, granted: bool = True) -> AdvisoryLock:
    """A lock as the sampler returns it: the tracker has not dated it yet."""
    row = held(key, pid, held_for=None) if granted else waiting(key, pid)
    return AdvisoryLock(row.database, row.key, row.mode, row.granted, row.pid)


def sessions(*backends: Backend) -> dict[int, Backend]:
    return {b.pid: b for b in backends}


def worker(pid: int = 1234, at: float = 0.0, **state: Any) -> Backend:
    """The same session (one backend_start) as seen ``at`` seconds after NOW."""
    return backend(pid, now=later(at), connected_for=3600 + at, **state)


def started(pid: int) -> str:
    """When ``backend(pid)`` connected, as a dump writes it."""
    start = backend(pid).backend_start
    assert start is not None  # backend() always dates its session
    return start.isoformat()


def first_seen(tracker: HoldTracker, locks: Iterable[AdvisoryLock], *args: Any) -> datetime | None:
    (observed,) = tracker.observe(tuple(locks), *args)
    return observed.first_seen


def restarted(tracker: HoldTracker, now: datetime) -> HoldTracker:
    """A new tracker loaded from what ``tracker`` saved at ``now``, through JSON like the state file."""
    document = json.loads(json.dumps(tracker.dump(now)))
    fresh = HoldTracker(continuity_gap=GAP)
    fresh.load(document)
    return fresh


# -- within one process --------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("idle", NOW - timedelta(seconds=90)),
        ("idle in transaction", NOW - timedelta(seconds=90)),
        ("active", NOW),
        (None, NOW),
    ],
)
def test_a_lock_first_seen_on_an_idle_session_is_dated_from_when_it_went_idle(
    state: str | None, expected: datetime
) -> None:
    # Taking a lock takes SQL; an idle session ran none since its state_change.
    holder = sessions(backend(1234, state=state, state_for=90))
    assert first_seen(HoldTracker(continuity_gap=GAP), [lock(1234)], holder, NOW) == expected


def test_a_wait_first_seen_is_dated_now_whatever_its_session_does() -> None:
    session = sessions(backend(1234, state="idle", state_for=90))
    waiter = lock(1234, granted=False)
    assert first_seen(HoldTracker(continuity_gap=GAP), [waiter], session, NOW) == NOW


def test_a_state_change_ahead_of_the_clock_never_dates_a_hold_in_the_future() -> None:
    ahead = sessions(backend(1234, state="idle", state_for=-5))
    assert first_seen(HoldTracker(continuity_gap=GAP), [lock(1234)], ahead, NOW) == NOW


def test_it_keeps_first_seen_across_polls_while_the_same_backend_holds_the_key() -> None:
    tracker = HoldTracker(continuity_gap=GAP)
    worker = sessions(backend(1234))
    assert first_seen(tracker, [lock(1234)], worker, NOW) == NOW
    assert first_seen(tracker, [lock(1234)], worker, later(10)) == NOW
    assert first_seen(tracker, [lock(1234)], worker, later(20)) == NOW


def test_it_restarts_the_clock_when_a_new_backend_reuses_the_pid() -> None:
    tracker = HoldTracker(continuity_gap=GAP)
    tracker.observe((lock(1234),), sessions(backend(1234, connected_for=3600)), NOW)
    reused = sessions(backend(1234, connected_for=5, now=later(10)))
    assert reused[1234].backend_start != worker(at=10).backend_start
    assert first_seen(tracker, [lock(1234)], reused, later(10)) == later(10)


def test_a_waiter_that_gets_the_lock_starts_a_new_hold() -> None:
    tracker = HoldTracker(continuity_gap=GAP)
    worker = sessions(backend(1301))
    assert first_seen(tracker, [lock(1301, granted=False)], worker, NOW) == NOW
    assert first_seen(tracker, [lock(1301, granted=False)], worker, later(10)) == NOW
    assert first_seen(tracker, [lock(1301)], worker, later(20)) == later(20)


def test_it_forgets_a_released_lock_so_taking_it_again_starts_a_new_hold() -> None:
    tracker = HoldTracker(continuity_gap=GAP)
    worker = sessions(backend(1234))
    tracker.observe((lock(1234),), worker, NOW)
    assert tracker.observe((), worker, later(10)) == ()
    assert len(tracker) == 0
    assert first_seen(tracker, [lock(1234)], worker, later(20)) == later(20)


def test_it_dates_each_key_of_one_backend_separately() -> None:
    tracker = HoldTracker(continuity_gap=GAP)
    worker = sessions(backend(1234))
    tracker.observe((lock(1234, 42),), worker, NOW)
    observed = tracker.observe((lock(1234, 42), lock(1234, 43)), worker, later(10))
    assert [item.first_seen for item in observed] == [NOW, later(10)]


# -- across a restart ------------------------------------------------------------


def test_a_restart_keeps_first_seen_when_the_lock_is_seen_again_within_the_gap() -> None:
    tracker = HoldTracker(continuity_gap=GAP)
    busy = sessions(backend(1234, state="active"))
    tracker.observe((lock(1234),), busy, NOW)
    tracker.observe((lock(1234),), busy, later(20))
    fresh = restarted(tracker, later(20))
    assert len(fresh) == 1
    assert first_seen(fresh, [lock(1234)], busy, later(20 + GAP)) == NOW


def test_after_a_long_gap_an_idle_holder_unchanged_since_the_save_keeps_its_first_seen() -> None:
    tracker = HoldTracker(continuity_gap=GAP)
    # idle since 10 s before the first sighting, so it has run no SQL since the save
    idle = sessions(backend(1234, idle_for=10))
    tracker.observe((lock(1234),), idle, NOW)
    fresh = restarted(tracker, NOW)
    still_idle = sessions(worker(at=3600, idle_for=3610))
    # first seen idle, so dated from when it went idle: it held the lock by then
    assert first_seen(fresh, [lock(1234)], still_idle, later(3600)) == NOW - timedelta(seconds=10)


def test_after_a_long_gap_an_idle_holder_that_ran_sql_since_the_save_starts_over() -> None:
    tracker = HoldTracker(continuity_gap=GAP)
    tracker.observe((lock(1234),), sessions(backend(1234, idle_for=10)), NOW)
    fresh = restarted(tracker, NOW)
    # idle again, but its state changed after the save: it may have re-taken the lock
    idle_again = sessions(worker(at=3600, idle_for=60))
    # ... and held it since going idle again at the latest
    assert first_seen(fresh, [lock(1234)], idle_again, later(3600)) == later(3540)


@pytest.mark.parametrize("state", ["active", None])
def test_after_a_long_gap_a_holder_that_is_not_idle_starts_over(state: str | None) -> None:
    tracker = HoldTracker(continuity_gap=GAP)
    tracker.observe((lock(1234),), sessions(backend(1234, idle_for=10)), NOW)
    fresh = restarted(tracker, NOW)
    # an old state_change proves nothing for a session that is running SQL
    busy = sessions(worker(at=3600, state=state, state_for=7200))
    assert first_seen(fresh, [lock(1234)], busy, later(3600)) == later(3600)


def test_after_a_long_gap_a_holder_without_a_session_row_starts_over() -> None:
    tracker = HoldTracker(continuity_gap=GAP)
    tracker.observe((lock(1234),), {}, NOW)
    fresh = restarted(tracker, NOW)
    assert first_seen(fresh, [lock(1234)], {}, later(3600)) == later(3600)


def test_a_restart_never_dates_a_hold_after_the_save() -> None:
    tracker = HoldTracker(continuity_gap=GAP)
    tracker.load(
        {
            "saved_at": NOW.isoformat(),
            "locks": [
                {
                    "pid": 1234,
                    "backend_start": started(1234),
                    "database": "app",
                    "key": "42",
                    "mode": "ExclusiveLock",
                    "granted": True,
                    "first_seen": later(600).isoformat(),
                }
            ],
        }
    )
    assert first_seen(tracker, [lock(1234)], sessions(backend(1234)), later(10)) == NOW


def test_a_save_after_a_sampling_outage_dates_the_locks_when_they_were_last_seen() -> None:
    tracker = HoldTracker(continuity_gap=GAP)
    busy = sessions(backend(1234))
    tracker.observe((lock(1234),), busy, NOW)
    # the target is down for an hour; the daemon still saves on schedule
    fresh = restarted(tracker, later(3600))
    # seen again just after the restart, but not for an hour before it: the
    # lock may have been released and taken again meanwhile
    assert first_seen(fresh, [lock(1234)], busy, later(3610)) == later(3610)


# -- malformed dumps ---------------------------------------------------------------


def good_entry(**changes: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "pid": 1234,
        "backend_start": started(1234),
        "database": "app",
        "key": "42",
        "mode": "ExclusiveLock",
        "granted": True,
        "first_seen": NOW.isoformat(),
    }
    entry.update(changes)
    return entry


@pytest.mark.parametrize(
    "document",
    [
        None,
        [],
        "garbage",
        {},
        {"saved_at": "yesterday", "locks": [good_entry()]},
        {"saved_at": NOW.isoformat()},
        {"saved_at": NOW.isoformat(), "locks": 7},
        {"saved_at": 12, "locks": [good_entry()]},
        # without a zone the time cannot be compared with the clock's
        {"saved_at": NOW.replace(tzinfo=None).isoformat(), "locks": [good_entry()]},
    ],
)
def test_a_malformed_dump_is_ignored_without_raising(document: Any) -> None:
    tracker = HoldTracker(continuity_gap=GAP)
    tracker.load(document)
    assert len(tracker) == 0
    assert first_seen(tracker, [lock(1234)], sessions(backend(1234)), later(10)) == later(10)


@pytest.mark.parametrize(
    "entry",
    [
        None,
        "42",
        [1, 2],
        good_entry(key="forty-two"),
        good_entry(key="1,2,3"),
        good_entry(pid="x"),
        good_entry(first_seen="noon"),
        good_entry(first_seen=None),
        good_entry(first_seen=NOW.replace(tzinfo=None).isoformat()),
        {k: v for k, v in good_entry().items() if k != "mode"},
    ],
)
def test_a_malformed_entry_is_dropped_and_the_rest_restored(entry: Any) -> None:
    tracker = HoldTracker(continuity_gap=GAP)
    tracker.load({"saved_at": NOW.isoformat(), "locks": [entry, good_entry()]})
    assert len(tracker) == 1
    assert first_seen(tracker, [lock(1234)], sessions(backend(1234)), later(10)) == NOW


# -- when the state file needs rewriting ------------------------------------------


def test_changed_since_dump_tells_when_the_set_of_locks_changes() -> None:
    tracker = HoldTracker(continuity_gap=GAP)
    worker = sessions(backend(1234), backend(1301))
    assert not tracker.changed_since_dump()
    tracker.observe((lock(1234),), worker, NOW)
    assert tracker.changed_since_dump()
    tracker.dump(NOW)
    assert not tracker.changed_since_dump()
    tracker.observe((lock(1234),), worker, later(10))
    assert not tracker.changed_since_dump(), "the same lock seen again changes nothing on disk"
    tracker.observe((lock(1234), lock(1301, granted=False)), worker, later(20))
    assert tracker.changed_since_dump()
    tracker.dump(later(20))
    tracker.observe((lock(1301, granted=False),), worker, later(30))
    assert tracker.changed_since_dump(), "a released lock must leave the file too"


def test_a_freshly_loaded_tracker_has_nothing_new_to_dump() -> None:
    tracker = HoldTracker(continuity_gap=GAP)
    tracker.observe((lock(1234),), sessions(backend(1234)), NOW)
    assert not restarted(tracker, NOW).changed_since_dump()


def test_an_outage_longer_than_the_gap_resets_a_hold_whose_session_ran_sql_meanwhile() -> None:
    tracker = HoldTracker(continuity_gap=30)
    busy = backend(7, state="idle", state_for=1)
    start = NOW - timedelta(hours=1)
    tracker.observe((held(42, 7),), {7: replace(busy, state_change=start)}, start)
    # Sampling failed for an hour; now the session has run SQL since the last
    # sighting: the hold starts over, from when the session went idle again.
    (lock,) = tracker.observe((held(42, 7),), {7: busy}, NOW)
    assert lock.first_seen == busy.state_change == NOW - timedelta(seconds=1)


def test_an_outage_keeps_a_hold_whose_session_stayed_idle_throughout() -> None:
    tracker = HoldTracker(continuity_gap=30)
    start = NOW - timedelta(hours=1)
    idle = replace(backend(7, state="idle"), state_change=start - timedelta(seconds=1))
    tracker.observe((held(42, 7),), {7: idle}, start)
    (lock,) = tracker.observe((held(42, 7),), {7: idle}, NOW)
    assert lock.first_seen == idle.state_change

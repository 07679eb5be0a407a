"""The hold times' save format: locks of one session taken in one go are stored
once with their keys, and files of the one-entry-per-lock format still load."""

from __future__ import annotations

import json
from datetime import timedelta

from lockwatch.state.holds import HoldTracker
from tests.fixtures.snapshots import NOW, backend, held
from tests.unit.state.test_holds import GAP, restarted, sessions

LATER = NOW + timedelta(seconds=10)


def test_many_locks_of_one_idle_session_are_stored_as_one_entry_and_load_back() -> None:
    tracker = HoldTracker(continuity_gap=GAP)
    locks = tuple(held(k, 100, held_for=None) for k in range(1, 5001))
    seen = tracker.observe(locks, sessions(backend(100, "worker", xact_for=None)), NOW)

    document = json.loads(json.dumps(tracker.dump(NOW)))
    fresh = restarted(tracker, NOW)

    (entry,) = document["held"]
    assert len(entry["keys"]) == 5000
    assert len(json.dumps(document)) < 20 * 5000  # a few bytes per key, not a record
    # Busy, it proves nothing by itself: only the restored file dates the holds.
    again = fresh.observe(locks, sessions(backend(100, "worker", xact_for=None)), LATER)
    assert {lock.first_seen for lock in again} == {lock.first_seen for lock in seen} == {NOW}


def test_a_file_of_one_entry_per_lock_still_loads() -> None:
    tracker = HoldTracker(continuity_gap=GAP)
    lock = held(42, 100, held_for=None)
    (seen,) = tracker.observe((lock,), sessions(backend(100, "worker", xact_for=None)), NOW)
    (entry,) = tracker.dump(NOW)["held"]
    old = {k: v for k, v in entry.items() if k != "keys"}
    fresh = HoldTracker(continuity_gap=GAP)

    fresh.load({"saved_at": NOW.isoformat(), "locks": [{**old, "key": "42"}]})

    (again,) = fresh.observe((lock,), sessions(backend(100, "worker", xact_for=None)), LATER)
    assert again.first_seen == seen.first_seen == NOW

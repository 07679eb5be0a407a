"""Hold tracking of locks that may be transaction-level: a transaction lock
ends with its transaction, so one seen again in another transaction, and never
seen outside one, is a new hold; one seen with no transaction open is a
session lock, held across any number of transactions."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from lockwatch.model.locks import AdvisoryLock, Backend
from lockwatch.state.holds import HoldTracker
from tests.fixtures.snapshots import NOW, backend, held

GAP = 30.0
PID = 1234


def later(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def lock() -> AdvisoryLock:
    row = held(42, PID, held_for=None)
    return AdvisoryLock(row.database, row.key, row.mode, row.granted, row.pid)


def in_transaction(at: float, began: float) -> dict[int, Backend]:
    """The session at ``at`` s, running a transaction begun at ``began`` s."""
    return {
        PID: backend(
            PID, now=later(at), connected_for=3600 + at, xact_for=at - began, state_for=at - began
        )
    }


def idle(at: float, since: float) -> dict[int, Backend]:
    return {PID: backend(PID, now=later(at), connected_for=3600 + at, idle_for=at - since)}


def observe(tracker: HoldTracker, sessions: dict[int, Backend], at: float) -> AdvisoryLock:
    (seen,) = tracker.observe((lock(),), sessions, later(at), read_at=later(at))
    return seen


def test_a_lock_seen_again_in_another_transaction_is_a_new_hold() -> None:
    tracker = HoldTracker(continuity_gap=GAP)
    assert observe(tracker, in_transaction(0.1, 0.0), 0.1).first_seen == later(0.1)
    assert observe(tracker, in_transaction(0.2, 0.0), 0.2).first_seen == later(0.1)
    second = observe(tracker, in_transaction(1.1, 1.0), 1.1)
    assert second.first_seen == later(1.1)
    assert second.session_level is False


def test_the_same_lock_object_in_a_new_transaction_is_a_new_hold_too() -> None:
    # The sampler hands out the same object for a lock it saw unchanged.
    tracker = HoldTracker(continuity_gap=GAP)
    same = lock()
    tracker.observe((same,), in_transaction(0.1, 0.0), later(0.1), read_at=later(0.1))
    (again,) = tracker.observe((same,), in_transaction(1.1, 1.0), later(1.1), read_at=later(1.1))
    assert again.first_seen == later(1.1)


def test_a_lock_seen_with_no_transaction_open_keeps_its_hold_across_transactions() -> None:
    tracker = HoldTracker(continuity_gap=GAP)
    first = observe(tracker, idle(1.0, 0.5), 1.0)
    assert first.session_level is True
    assert first.first_seen == later(0.5)
    for at in (2.0, 3.0, 4.0):
        kept = observe(tracker, in_transaction(at, at - 0.1), at)
        assert kept.first_seen == later(0.5)
        assert kept.session_level is True


def test_an_idle_state_begun_after_the_locks_were_read_proves_nothing() -> None:
    # The locks were read at 1.0 inside a transaction, which ended at 1.001
    # before the sessions were read.
    tracker = HoldTracker(continuity_gap=GAP)
    (seen,) = tracker.observe((lock(),), idle(1.01, 1.001), later(1.01), read_at=later(1.0))
    assert seen.session_level is False


def test_what_is_known_of_a_holds_transaction_survives_a_restart() -> None:
    tracker = HoldTracker(continuity_gap=GAP)
    observe(tracker, in_transaction(0.1, 0.0), 0.1)
    fresh = HoldTracker(continuity_gap=GAP)
    fresh.load(json.loads(json.dumps(tracker.dump(later(0.1)))))
    assert observe(fresh, in_transaction(1.1, 1.0), 1.1).first_seen == later(1.1)


@given(st.lists(st.tuples(st.booleans(), st.integers(1, 5)), min_size=1, max_size=30))
def test_a_hold_never_seen_outside_a_transaction_is_never_older_than_its_transaction(
    steps: list[tuple[bool, int]],
) -> None:
    """Polls 1 s apart; before each, a new transaction may begin (it began
    between the polls); it runs for some polls."""
    tracker = HoldTracker(continuity_gap=GAP)
    at, began = 0.0, 0.0
    for new_transaction, polls in steps:
        if new_transaction:
            began = at + 0.5
            at += 1.0
        for _ in range(polls):
            seen = observe(tracker, in_transaction(at, began), at)
            assert seen.first_seen is not None and seen.first_seen >= later(began)
            at += 1.0

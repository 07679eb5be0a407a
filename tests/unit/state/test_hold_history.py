"""The hold history: the tracker tells which holds ended and began, the
history keeps each key's in a bounded sketch, for a bounded set of keys, and
survives a restart."""

from __future__ import annotations

import json
import logging
import math
from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockwatch.model.hold_history import HISTOGRAM_BUCKETS, QUANTILE_ERROR
from lockwatch.model.locks import AdvisoryLock, Backend, LockKey
from lockwatch.settings.fields import Learned
from lockwatch.settings.locks import Learning, LockRole, LockSettings, NamedLock
from lockwatch.state.hold_history import MAX_BUCKETS, HoldHistory, QuantileSketch
from lockwatch.state.holds import HoldTracker
from tests.fixtures.snapshots import DB, NOW, backend, held

GAP = 30.0
LEADER = NamedLock("scheduler", LockKey.bigint(77), role=LockRole.LEADER)


def later(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def lock(pid: int, key: int = 42) -> AdvisoryLock:
    row = held(key, pid, held_for=None)
    return AdvisoryLock(row.database, row.key, row.mode, row.granted, row.pid)


def in_transaction(pid: int, began: float, connected_for: float = 3600) -> dict[int, Backend]:
    """A session running a transaction that began ``began`` seconds after NOW."""
    session = backend(pid, state="active", connected_for=connected_for)
    return {pid: replace(session, xact_start=later(began))}


def poll(
    tracker: HoldTracker,
    history: HoldHistory,
    settings: LockSettings,
    at: float,
    locks: tuple[AdvisoryLock, ...],
    sessions: dict[int, Backend],
) -> None:
    tracker.observe(locks, sessions, later(at))
    history.update(tracker.ended, tracker.began, settings, later(at))


# -- the tracker's completions --------------------------------------------------


def test_a_released_lock_ends_its_hold_at_the_last_poll_that_saw_it() -> None:
    tracker = HoldTracker(continuity_gap=GAP)
    worker = {1234: backend(1234, state="active")}
    tracker.observe((lock(1234),), worker, NOW)
    assert [key[0] for key in tracker.began] == [1234] and tracker.ended == []
    tracker.observe((lock(1234),), worker, later(5))
    assert tracker.ended == [] and tracker.began == []
    tracker.observe((), worker, later(10))
    ((observed, first, last),) = tracker.ended
    assert (observed[0], first, last) == (1234, NOW, later(5))


def test_a_transaction_lock_taken_again_in_a_new_transaction_ends_the_old_hold() -> None:
    tracker = HoldTracker(continuity_gap=GAP)
    tracker.observe((lock(1234),), in_transaction(1234, 0), NOW)
    tracker.observe((lock(1234),), in_transaction(1234, 0), later(1))
    tracker.observe((lock(1234),), in_transaction(1234, 1.5), later(2))
    ((_, first, last),) = tracker.ended
    assert (first, last) == (NOW, later(1))
    assert len(tracker.began) == 1


# -- the sketch ------------------------------------------------------------------

durations = st.floats(min_value=1e-3, max_value=4 * 86400, allow_nan=False)


@given(st.lists(durations | st.just(0.0), min_size=1, max_size=400))
def test_every_quantile_is_within_the_stated_error_of_the_true_one(values: list[float]) -> None:
    sketch = QuantileSketch()
    for value in values:
        sketch.add(value)
    ordered = sorted(values)
    for q in (0.0, 0.5, 0.9, 0.99, 1.0):
        true = ordered[math.floor(q * (len(values) - 1))]
        assert abs(sketch.quantile(q) - true) <= QUANTILE_ERROR * true + 1e-12, q


@given(st.lists(st.floats(min_value=0.0, max_value=1e12, allow_nan=False), max_size=2000))
def test_the_sketch_never_grows_past_its_bound_and_counts_everything(values: list[float]) -> None:
    sketch = QuantileSketch()
    for value in values:
        sketch.add(value)
    assert len(sketch.buckets) <= MAX_BUCKETS
    assert sketch.count == len(values) == sketch.zeros + sum(sketch.buckets.values())
    restored = QuantileSketch.load(json.loads(json.dumps(sketch.dump())))
    assert restored.quantile(0.99) == sketch.quantile(0.99)


# -- which keys have a history ---------------------------------------------------


@given(st.lists(st.integers(min_value=1, max_value=500), min_size=1, max_size=300))
def test_keys_past_the_top_n_share_one_history_and_every_hold_is_counted(keys: list[int]) -> None:
    settings = LockSettings(top_n=5, named=(NamedLock("billing", LockKey.bigint(1)),))
    tracker, history = HoldTracker(continuity_gap=GAP), HoldHistory()
    worker = {1234: backend(1234, state="active")}
    for step, key in enumerate(keys):
        poll(tracker, history, settings, 2 * step, (lock(1234, key),), worker)
        poll(tracker, history, settings, 2 * step + 1, (), worker)
    shown = history.published()
    assert len(history.keys) <= 1 + settings.top_n
    assert sum(h.holds.count for h in shown if h.holds) == len(keys)
    if 1 in keys:
        assert (DB, LockKey.bigint(1)) in history.keys  # a named lock always has its own
    for past in shown:
        assert past.holds is not None
        assert len(past.holds.buckets) == len(HISTOGRAM_BUCKETS)
        assert past.holds.buckets[-1] <= past.holds.count
        if past.key is not None:
            assert past.holds.count == keys.count(past.key.first)


def test_a_catalogued_key_has_its_own_history_beyond_the_top_n() -> None:
    settings = LockSettings(top_n=0)  # the catalogue names Prisma Migrate's key
    history = HoldHistory()
    tracker = HoldTracker(continuity_gap=GAP)
    worker = {1234: backend(1234, state="active")}
    for step, key in enumerate((72707369, 5)):
        poll(tracker, history, settings, 2 * step, (lock(1234, key),), worker)
        poll(tracker, history, settings, 2 * step + 1, (), worker)
    assert [h.lock for h in history.published()] == ["72707369", "(other keys)"]


def test_an_ignored_key_is_not_recorded() -> None:
    settings = LockSettings(ignore=(LockKey.bigint(42),))
    tracker, history = HoldTracker(continuity_gap=GAP), HoldHistory()
    worker = {1234: backend(1234, state="active")}
    poll(tracker, history, settings, 0, (lock(1234),), worker)
    poll(tracker, history, settings, 1, (), worker)
    assert history.published() == ()


def test_a_plain_key_quiet_for_a_learning_period_gives_its_place_up() -> None:
    settings = LockSettings(top_n=1, learning=Learning(period=60.0))
    tracker, history = HoldTracker(continuity_gap=GAP), HoldHistory()
    worker = {1234: backend(1234, state="active")}
    for at, key in ((0, 5), (10, 6), (100, 7)):
        poll(tracker, history, settings, at, (lock(1234, key),), worker)
        poll(tracker, history, settings, at + 1, (), worker)
    assert [h.lock for h in history.published()] == ["7", "(other keys)"]


# -- leader churn and restarts ---------------------------------------------------


def test_a_leader_taken_by_another_backend_is_a_change_and_the_same_one_is_not() -> None:
    settings = LockSettings(named=(LEADER,))
    tracker, history = HoldTracker(continuity_gap=GAP), HoldHistory()
    first = {1: backend(1, state="active")}
    second = {2: backend(2, state="active")}
    reconnected = {1: backend(1, state="active", connected_for=1)}
    poll(tracker, history, settings, 0, (lock(1, 77),), first)
    poll(tracker, history, settings, 1, (lock(2, 77),), second)
    poll(tracker, history, settings, 2, (lock(2, 77),), second)
    poll(tracker, history, settings, 3, (lock(1, 77),), reconnected)
    (past,) = history.published()
    assert past.holder_changes == (later(1), later(3))
    assert past.holds is not None and past.holds.count == 2


def test_the_history_survives_a_restart_through_json() -> None:
    settings = LockSettings(named=(LEADER,))
    tracker, history = HoldTracker(continuity_gap=GAP), HoldHistory()
    for step in range(6):
        pid = 1 + step % 2
        poll(tracker, history, settings, step, (lock(pid, 77),), {pid: backend(pid)})
    poll(tracker, history, settings, 6, (lock(5, 9),), {5: backend(5)})
    poll(tracker, history, settings, 7, (), {})
    fresh = HoldHistory()
    fresh.load(json.loads(json.dumps(history.dump())))
    assert fresh.published() == history.published()
    assert fresh.dump() == history.dump()


def test_a_damaged_entry_is_dropped_and_the_rest_kept() -> None:
    settings = LockSettings()
    tracker, history = HoldTracker(continuity_gap=GAP), HoldHistory()
    worker = {1234: backend(1234, state="active")}
    for step, key in enumerate((5, 6)):
        poll(tracker, history, settings, 2 * step, (lock(1234, key),), worker)
        poll(tracker, history, settings, 2 * step + 1, (), worker)
    document = history.dump()
    document["keys"][0]["holds"]["sketch"]["counts"] = [-1]
    fresh = HoldHistory()
    fresh.load(document)
    assert [h.lock for h in fresh.published()] == ["6"]


def test_a_reload_makes_a_lock_no_longer_named_plain_and_an_ignored_one_forgotten() -> None:
    named = LockSettings(top_n=1, named=(NamedLock("a", LockKey.bigint(5)), LEADER))
    tracker, history = HoldTracker(continuity_gap=GAP), HoldHistory()
    worker = {1234: backend(1234, state="active")}
    for step, key in enumerate((5, 77, 6)):
        poll(tracker, history, named, 2 * step, (lock(1234, key),), worker)
        poll(tracker, history, named, 2 * step + 1, (), worker)
    assert [h.lock for h in history.published()] == ["5", "6", "77"]
    reloaded = LockSettings(top_n=1, ignore=(LockKey.bigint(77),))
    poll(tracker, history, reloaded, 10, (), worker)
    # 6 keeps the one plain place; 5, named no more, finds none; 77 is ignored now.
    assert [h.lock for h in history.published()] == ["6"]


# -- what an auto budget learns from ---------------------------------------------


def hold_for(
    tracker: HoldTracker, history: HoldHistory, settings: LockSettings, at: float, seconds: float
) -> float:
    """One hold of key 42 from ``at`` for ``seconds``; when it ended."""
    worker = {1234: backend(1234, state="active")}
    poll(tracker, history, settings, at, (lock(1234),), worker)
    poll(tracker, history, settings, at + seconds, (lock(1234),), worker)
    poll(tracker, history, settings, at + seconds + 0.1, (), worker)
    return at + seconds + 0.1


def test_holds_lengthened_within_a_period_do_not_raise_the_budget_and_a_fast_rise_is_said(
    caplog: pytest.LogCaptureFixture,
) -> None:
    learning = Learning(period=100.0, min_holds=3, factor=2.0, floor=0.1, ceiling=20.0)
    settings = LockSettings(max_hold=Learned.AUTO, learning=learning)
    tracker, history = HoldTracker(continuity_gap=GAP), HoldHistory()
    at = 0.0
    for _ in range(3):  # the usual: 1 s
        at = hold_for(tracker, history, settings, at, 1.0)
    at = hold_for(tracker, history, settings, 100.0, 1.0)  # the first period ends
    past = history.keys[DB, LockKey.bigint(42)]
    assert past.baseline is not None and 0.9 < past.baseline < 1.1
    assert settings.learned_budget(past, later(at)) == pytest.approx(2 * past.baseline)
    for seconds in (1.9, 3.7, 7.0, 13.0):  # each just under what it would teach
        at = hold_for(tracker, history, settings, at, seconds)
    past = history.keys[DB, LockKey.bigint(42)]
    assert past.baseline is not None and past.baseline < 1.1  # the budget stayed ~2 s
    assert settings.learned_budget(past, later(at)) == pytest.approx(2 * past.baseline)
    caplog.set_level(logging.WARNING)
    at = hold_for(tracker, history, settings, 210.0, 13.0)  # the next period
    past = history.keys[DB, LockKey.bigint(42)]
    assert settings.learned_budget(past, later(at)) == 20.0  # the ceiling
    assert "lengthened fast" in caplog.text and "at most 20s" in caplog.text


def test_the_ceiling_is_ten_times_the_static_max_hold_unless_set() -> None:
    assert LockSettings(max_hold=Learned.AUTO).learned_ceiling == 3000.0
    assert LockSettings(max_hold=60.0).learned_ceiling == 600.0
    assert LockSettings(learning=Learning(ceiling=90.0)).learned_ceiling == 90.0

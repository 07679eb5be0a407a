"""Budgets learned from a key's own history (``max_hold: auto``,
``orphan_after: auto``) and leader churn, on synthetic histories."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from lockwatch.detect.locks import detect_locks
from lockwatch.detect.within_hold import within_hold
from lockwatch.model.evidence import ChurnEvidence, LockEvidence
from lockwatch.model.findings import FindingKind
from lockwatch.model.hold_history import DurationStats, KeyHistory
from lockwatch.model.locks import LockKey
from lockwatch.settings.fields import Learned
from lockwatch.settings.locks import Learning, LockRole, LockSettings, NamedLock
from tests.fixtures.evidence import evidence_as
from tests.fixtures.snapshots import DB, NOW, backend, held, snapshot

KEY = LockKey.bigint(42)
LEARNING = Learning(period=3600.0, min_holds=50, factor=10.0, floor=1.0)
AUTO = LockSettings(max_hold=Learned.AUTO, learning=LEARNING)


def past(
    p99: float, count: int = 200, learned_for: float = 7200.0, p50: float | None = None
) -> dict[tuple[str, LockKey], KeyHistory]:
    """A key with ``count`` completed holds, recorded since ``learned_for`` seconds ago."""
    usual = p99 / 20 if p50 is None else p50
    stats = DurationStats(count, usual, p99 / 2, p99, p99 * 1.5, usual, usual * count, ())
    since = NOW - timedelta(seconds=learned_for)
    return {(DB, KEY): KeyHistory(DB, KEY, stats, None, since, baseline=p99)}


def long_holds(
    held_for: float, settings: LockSettings, history: dict[tuple[str, LockKey], KeyHistory]
) -> list[str]:
    lock = held(42, 1234, held_for=held_for)
    found = detect_locks(snapshot(lock, backends=[backend(1234)]), settings, NOW, history=history)
    return [f.summary for f in found if f.kind is FindingKind.LOCK_HELD_TOO_LONG]


def test_a_hundred_times_a_millisecond_hold_fires_with_the_keys_normal_in_the_evidence() -> None:
    history = past(p99=0.8, p50=0.04)
    lock = held(42, 1234, held_for=300.0)
    (finding,) = detect_locks(snapshot(lock, backends=[backend(1234)]), AUTO, NOW, history=history)
    assert finding.kind is FindingKind.LOCK_HELD_TOO_LONG
    facts = evidence_as(finding, LockEvidence).history
    assert facts is not None and facts.learned
    assert facts.text == "usually 40ms, p99 800ms, now 5m"
    assert evidence_as(finding, LockEvidence).max_hold_seconds == 8.0
    assert "learned budget 8s (usually 40ms, p99 800ms, now 5m)" in finding.summary
    assert finding.since == lock.first_seen + timedelta(seconds=8.0)  # type: ignore[operator]


@given(st.floats(min_value=0.001, max_value=100.0), st.floats(min_value=0.0, max_value=0.999))
def test_a_hold_within_its_learned_budget_is_quiet_and_past_it_fires(
    p99: float, share: float
) -> None:
    budget = max(LEARNING.factor * p99, LEARNING.floor)
    assert long_holds(budget * share, AUTO, past(p99)) == []
    assert len(long_holds(budget * 1.01 + 0.01, AUTO, past(p99))) == 1


def test_while_learning_the_static_default_applies() -> None:
    too_few = past(p99=0.8, count=49)
    too_soon = past(p99=0.8, learned_for=3599.0)
    for history in (too_few, too_soon, {}):
        assert long_holds(299.0, AUTO, history) == []
        (summary,) = long_holds(301.0, AUTO, history)
        assert "budget 5m" in summary


def test_a_static_budget_ignores_the_history() -> None:
    fixed = LockSettings(max_hold=60.0, learning=LEARNING)
    assert long_holds(59.0, fixed, past(p99=0.8)) == []


def test_a_named_lock_can_learn_while_the_target_keeps_its_static_budget() -> None:
    named = NamedLock("webhook", KEY, max_hold=Learned.AUTO)
    settings = LockSettings(max_hold=600.0, named=(named,), learning=LEARNING)
    assert len(long_holds(30.0, settings, past(p99=0.8))) == 1
    assert long_holds(30.0, settings, {}) == []  # learning: the target's 10 minutes


def test_orphan_after_auto_learns_the_idle_budget_too() -> None:
    settings = LockSettings(orphan_after=Learned.AUTO, max_hold=3600.0, learning=LEARNING)
    lock = held(42, 1234, held_for=20.0)
    idle = backend(1234, idle_for=20.0)
    found = detect_locks(snapshot(lock, backends=[idle]), settings, NOW, history=past(p99=0.8))
    assert [f.kind for f in found] == [FindingKind.LOCK_ORPHANED]
    assert detect_locks(snapshot(lock, backends=[idle]), settings, NOW, history={}) == []


# -- leader churn ------------------------------------------------------------------

LEADER = NamedLock("scheduler", KEY, role=LockRole.LEADER)
CHURNY = LockSettings(named=(LEADER,), leader_churn_changes=3, leader_churn_window=3600.0)


def changed(*minutes_ago: float) -> dict[tuple[str, LockKey], KeyHistory]:
    moments = tuple(NOW - timedelta(minutes=m) for m in sorted(minutes_ago, reverse=True))
    return {(DB, KEY): KeyHistory(DB, KEY, None, None, NOW - timedelta(days=1), moments)}


def churn(history: dict[tuple[str, LockKey], KeyHistory]) -> list[ChurnEvidence]:
    lock = held(42, 1234, held_for=10.0)
    found = detect_locks(snapshot(lock, backends=[backend(1234)]), CHURNY, NOW, history=history)
    return [evidence_as(f, ChurnEvidence) for f in found if f.kind is FindingKind.LEADER_LOCK_CHURN]


def test_a_leader_that_changed_hands_three_times_within_the_hour_churns() -> None:
    (evidence,) = churn(changed(50, 30, 1))
    assert evidence.changes == 3 and evidence.changes_per_hour == 3.0
    assert evidence.holder_pid == 1234


def test_changes_spread_wider_than_the_window_are_no_churn() -> None:
    assert churn(changed(300, 200, 100, 1)) == []
    assert churn(changed(30, 1)) == []


def test_churn_is_told_while_nobody_holds_the_leader_for_a_moment() -> None:
    found = detect_locks(snapshot(), CHURNY, NOW, history=changed(20, 10, 0))
    kinds = sorted(f.kind.value for f in found)
    assert kinds == ["leader_lock_churn", "leader_lock_missing"]


def test_churn_ends_with_its_window_though_the_last_leader_holds_on() -> None:
    lock = held(42, 1234, held_for=3000.0)
    snap = snapshot(lock, backends=[backend(1234)])
    firing = detect_locks(snap, CHURNY, NOW, history=changed(50, 49, 48))
    _, memory = within_hold(firing, {}, snap, CHURNY)
    later = NOW + timedelta(minutes=15)
    quiet = detect_locks(snap, CHURNY, later, history=changed(50, 49, 48))
    held_later, _ = within_hold(quiet, memory, snap, CHURNY)
    assert [f.kind for f in firing] == [FindingKind.LEADER_LOCK_CHURN]
    assert quiet == [] and held_later == frozenset()

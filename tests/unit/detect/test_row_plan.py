"""A plan of the rows followed from poll to poll by what changed (the rows
released and taken) judges as a plan sorted anew from every poll's rows: over
random floods whose sessions let go of keys, take others, share keys and
queue on them, with keys named, ignored and held alike (as PostgreSQL grants
them: a key held exclusively by one session alone)."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from lockwatch.detect import key_groups
from lockwatch.detect.locks import detect_locks
from lockwatch.model.holdings import LockChange
from lockwatch.model.locks import AdvisoryLock, LockSnapshot, LockSummary
from lockwatch.settings.locks import LockSettings, NamedLock
from tests.fixtures.snapshots import NOW, backend, held, key, snapshot, waiting

PIDS = (1000, 1001, 1002)
SETTINGS = LockSettings(
    max_hold=60,
    orphan_after=3600,
    named=(NamedLock(name="nightly", key=key(3)),),
    ignore=(key(5),),
)
# (pid, key, kind, minutes held): kind 0 exclusive, 1 shared, 2 waiting.
ROWS = st.tuples(
    st.sampled_from(PIDS), st.integers(1, 12), st.integers(0, 2), st.sampled_from((5, 20))
)


def _lock(pid: int, k: int, kind: int, minutes: int) -> AdvisoryLock:
    if kind == 2:
        return waiting(k, pid, waited_for=30)
    mode = "ShareLock" if kind == 1 else "ExclusiveLock"
    return held(k, pid, held_for=minutes * 60.0, mode=mode)


def _granted_as_postgresql_grants(locks: list[AdvisoryLock]) -> list[AdvisoryLock]:
    """No two sessions hold a key exclusively, nor one shared and another
    exclusively: the later rows that would are left out."""
    granted: dict[object, tuple[frozenset[int], bool]] = {}
    kept = []
    for lock in locks:
        if lock.granted:
            pids, exclusive = granted.get(lock.key, (frozenset(), False))
            mine = lock.mode == "ExclusiveLock"
            if pids - {lock.pid} and (exclusive or mine):
                continue
            granted[lock.key] = (pids | {lock.pid}, exclusive or mine)
        kept.append(lock)
    return kept


def _canonical(plan: key_groups.RowPlan) -> tuple[object, ...]:
    keys = sorted(
        (row, named, sorted(map(id, rows))) for row, (_, _, named, rows) in plan.keys.items()
    )
    ignored = sorted((row, sorted(map(id, rows))) for row, rows in plan.ignored.items())
    alike = sorted(
        (shape, [id(lock) for lock in lowest], count)
        for shape, (lowest, count) in plan.alike.items()
    )
    return repr(keys), repr(ignored), repr(alike)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(ROWS, min_size=6, max_size=30, unique_by=lambda row: row[:3]),
    st.lists(
        st.tuples(st.sets(st.integers(0, 29), max_size=3), st.lists(ROWS, max_size=3)),
        min_size=1,
        max_size=4,
    ),
)
def test_a_plan_followed_by_what_changed_is_the_plan_sorted_anew(
    first: list[tuple[int, int, int, int]],
    polls: list[tuple[set[int], list[tuple[int, int, int, int]]]],
) -> None:
    sessions = snapshot(backends=[backend(pid, idle_for=4000) for pid in PIDS]).backends
    locks = tuple(_granted_as_postgresql_grants([_lock(*row) for row in first]))
    summary = LockSummary.of(locks)
    plan = key_groups.RowPlan()
    detect_locks(LockSnapshot("main", NOW, 180001, locks, sessions), SETTINGS, NOW, plan=plan)
    for later, (released, taken_rows) in enumerate(polls, start=1):
        kept = [lock for at, lock in enumerate(locks) if at not in released]
        present = {(lock.pid, lock.key.first, lock.mode, lock.granted) for lock in kept}
        taken = [
            lock
            for lock in map(lambda row: _lock(*row), taken_rows)
            if (lock.pid, lock.key.first, lock.mode, lock.granted) not in present
        ]
        after = tuple(_granted_as_postgresql_grants(kept + taken))
        change = LockChange.between(locks, after)
        summary = LockSummary.of(after, summary, change)
        now = NOW + timedelta(seconds=later)
        snap = LockSnapshot("main", now, 180001, after, sessions, summary=summary)
        fresh = LockSnapshot("main", now, 180001, after, sessions)
        assert detect_locks(snap, SETTINGS, now, plan=plan) == detect_locks(fresh, SETTINGS, now)
        if plan.locks is after:
            anew = key_groups._sorted_rows(list(after), SETTINGS, plan.built, None)
            assert _canonical(plan) == _canonical(anew)
        locks = after

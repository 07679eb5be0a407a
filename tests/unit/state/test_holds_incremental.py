"""The quiet poll's shortcuts change nothing: over random sequences of polls,
the sampler's decoder (which hands back the last answer when the arrays and
sessions are unchanged) and the hold tracker fed its very same tuples find
exactly what decoding every poll from scratch and tracking fresh copies of the
locks finds: the same locks, hold times, ended and begun holds, and dump (in
whatever order: a tracker that changed its holds in place keeps them in the
order they came, one that made them anew in the locks' order)."""

from __future__ import annotations

from copy import copy
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lockwatch.model.holdings import LockChange
from lockwatch.model.locks import AdvisoryLock, Backend, LockSnapshot, LockSummary
from lockwatch.sample.lock_rows import LockDecoder, decode_locks
from lockwatch.state.holds import HoldTracker
from tests.fixtures.snapshots import NOW, backend, lock_arrays

GAP = 30.0
PIDS = (101, 102, 103)
# A poll's rows: (pid, classid, objid, flags); flags as advisory_locks.sql says.
ROWS = st.lists(
    st.tuples(
        st.sampled_from(PIDS), st.integers(0, 1), st.integers(1, 3), st.sampled_from((0, 1, 2, 4))
    ),
    max_size=6,
    unique_by=lambda row: row[:3],
)
STATES = ("idle", "active", "idle in transaction")

Poll = tuple[datetime, dict[str, Any], dict[int, Backend]]


def session(pid: int, state: str, start: int, xact: int | None) -> Backend:
    """A session started ``start`` hours before NOW (another start: the pid
    was reused), in transaction number ``xact`` (None: none), in ``state``
    since an hour before NOW."""
    return replace(
        backend(pid, state=state),
        backend_start=NOW - timedelta(hours=start),
        state_change=NOW - timedelta(hours=1),
        xact_start=None if xact is None else NOW - timedelta(hours=1, minutes=xact),
    )


@st.composite
def poll_sequences(draw: st.DrawFn) -> list[Poll]:
    """Polls a second (or, now and then, a gap) apart; each the last one
    again, or new rows and sessions (some missing, some reused pids)."""
    polls: list[Poll] = []
    now = NOW
    for _ in range(draw(st.integers(1, 8))):
        now += timedelta(seconds=draw(st.sampled_from((1.0, 1.0, 1.0, 45.0))))
        again = draw(st.booleans())
        if polls and again:
            _, arrays, sessions = polls[-1]
            if draw(st.booleans()):
                # Equal arrays in new lists, as the server answers each poll.
                arrays = {name: copy(column) for name, column in arrays.items()}
            if draw(st.booleans()):
                # The same locks; a session moved on (state, transaction).
                pid = draw(st.sampled_from(PIDS))
                sessions = {
                    **sessions,
                    pid: session(
                        pid,
                        draw(st.sampled_from(STATES)),
                        1,
                        draw(st.none() | st.integers(1, 2)),
                    ),
                }
            polls.append((now, arrays, sessions))
            continue
        rows = draw(ROWS)
        arrays = lock_arrays(rows)
        sessions = {
            pid: session(
                pid,
                draw(st.sampled_from(STATES)),
                draw(st.integers(1, 2)),
                draw(st.none() | st.integers(1, 2)),
            )
            for pid in PIDS
            if draw(st.integers(0, 5))
        }
        polls.append((now, arrays, sessions))
    return polls


def same_holds(ours: HoldTracker, theirs: HoldTracker, now: datetime) -> bool:
    """The same holds ended, begun and dumped, in whatever order."""
    return (sorted(ours.ended), ours.began, _canonical(ours.dump(now))) == (
        sorted(theirs.ended),
        theirs.began,
        _canonical(theirs.dump(now)),
    )


def _canonical(dump: dict[str, Any]) -> tuple[str, list[tuple[str, ...]]]:
    held = [
        (*sorted(map(str, entry["keys"])), *(f"{k}={v}" for k, v in entry.items() if k != "keys"))
        for entry in dump["held"]
    ]
    return dump["saved_at"], sorted(held)


def decoded(decoder: LockDecoder, arrays: dict[str, Any], sessions: dict[int, Backend]) -> Any:
    """As ``read_advisory_locks`` asks the decoder, empty answers included."""
    if arrays["owners"] is None:
        return decoder.nothing()
    return decoder.decode(arrays, sessions)


@settings(max_examples=300, deadline=None)
@given(poll_sequences())
def test_the_incremental_path_finds_what_a_rebuild_finds(polls: list[Poll]) -> None:
    decoder = LockDecoder()
    incremental, rebuilt = HoldTracker(GAP), HoldTracker(GAP)
    given_locks: tuple[AdvisoryLock, ...] = ()
    for now, arrays, sessions in polls:
        known = decoder.locks
        answer = decoded(decoder, arrays, sessions)
        fresh = decode_locks(arrays, sessions) if arrays["owners"] is not None else {}
        assert answer == fresh
        assert decoder.pids(arrays) == {owner // 8 for owner in arrays["owners"] or ()} - {0}
        if answer is not known:
            # As the reader does: the same answer is the same tuple again.
            given_locks = tuple(answer.values())
        assert given_locks == tuple(fresh.values())
        copies = tuple(replace(lock) for lock in fresh.values())
        ours = incremental.observe(given_locks, sessions, now, read_at=now)
        theirs = rebuilt.observe(copies, sessions, now, read_at=now)
        assert ours == theirs
        assert same_holds(incremental, rebuilt, now)
        summary = LockSnapshot("t", now, 180000, ours, summary=LockSummary.of(ours))
        assert summary.lock_summary() == LockSummary.of(theirs)


@st.composite
def churning_polls(draw: st.DrawFn) -> list[Poll]:
    """Many held locks, a few of them let go of and others taken between
    polls (some in the same order, some not), the sessions now and then in
    another transaction: the polls a job queue's server answers."""
    rows = {(pid, 0, key, 0) for pid in PIDS for key in range(1, 40)}
    polls: list[Poll] = []
    now = NOW
    xacts = dict.fromkeys(PIDS, 1)
    for _ in range(draw(st.integers(2, 6))):
        now += timedelta(seconds=draw(st.sampled_from((1.0, 1.0, 45.0))))
        gone = draw(st.sets(st.sampled_from(sorted(rows)), max_size=3))
        new = draw(
            st.sets(st.tuples(st.sampled_from(PIDS), st.just(1), st.integers(1, 9)), max_size=3)
        )
        rows = (rows - gone) | {(*row, 0) for row in new}
        pid = draw(st.sampled_from(PIDS))
        xacts[pid] = draw(st.sampled_from((xacts[pid], xacts[pid] + 1)))
        order = sorted(rows, reverse=draw(st.booleans()))
        sessions = {p: session(p, "idle in transaction", 1, xacts[p]) for p in PIDS}
        polls.append((now, lock_arrays(order), sessions))
    return polls


@settings(max_examples=200, deadline=None)
@given(churning_polls())
def test_a_few_locks_changing_among_many_find_what_a_rebuild_finds(polls: list[Poll]) -> None:
    decoder = LockDecoder()
    incremental, rebuilt = HoldTracker(GAP), HoldTracker(GAP)
    summary: LockSummary | None = None
    for now, arrays, sessions in polls:
        given_locks = tuple(decoded(decoder, arrays, sessions).values())
        copies = tuple(replace(lock) for lock in decode_locks(arrays, sessions).values())
        ours = incremental.observe(given_locks, sessions, now, read_at=now)
        assert ours == rebuilt.observe(copies, sessions, now, read_at=now)
        assert same_holds(incremental, rebuilt, now)
        change = incremental.change
        if change is not None and summary is not None:
            # What the tracker says changed is what tells the two apart by identity.
            told = LockChange.between(change.before, ours)
            assert (set(map(id, change.released)), set(map(id, change.taken))) == (
                set(map(id, told.released)),
                set(map(id, told.taken)),
            )
            assert change.before is summary.locks
        summary = LockSummary.of(ours, summary, change)
        assert summary == LockSummary.of(ours)

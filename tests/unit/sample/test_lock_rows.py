"""The per-lock arrays of advisory_locks.sql come as the server's binary
bytes (``lock_cursor``); decoded, they are the locks their lists give, the
same bytes again are the same answer with nothing decoded, and bytes that
changed in a stretch (only it decoded) the answer a whole decoding gives."""

from __future__ import annotations

import struct
from dataclasses import replace
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from lockwatch.model.locks import AdvisoryLock, Backend
from lockwatch.sample.lock_rows import LockDecoder, decode_locks, listed
from lockwatch.state.holds import HoldTracker
from tests.fixtures.snapshots import NOW, backend
from tests.unit.state.test_holds_incremental import GAP, PIDS, Poll, poll_sequences, same_holds

INT4, INT8 = 23, 20


def binary(values: list[int], oid: int, element: str) -> bytes:
    """A one-dimensional array without NULLs in PostgreSQL's binary format:
    dimensions, null flag, element type, size and lower bound, then each
    element's length and value (network order)."""
    size = struct.calcsize(element)
    head = struct.pack(">iiiii", 1, 0, oid, len(values), 1)
    return head + b"".join(struct.pack(">i" + element, size, value) for value in values)


def test_the_bytes_of_an_array_become_its_list() -> None:
    arrays = {"owners": binary([8 * 101, 8 * 102 + 4], INT4, "i"), "keys": binary([-1], INT8, "q")}
    assert listed({**arrays, "waitstarts": None}) == {
        "owners": [808, 820],
        "keys": [-1],
        "waitstarts": None,
    }


@settings(max_examples=200, deadline=None)
@given(poll_sequences())
def test_arrays_as_the_servers_bytes_decode_as_their_lists_do(polls: list[Poll]) -> None:
    as_lists, as_bytes = LockDecoder(), LockDecoder()
    for _, arrays, sessions in polls:
        if arrays["owners"] is None:
            continue
        raw = {
            **arrays,
            "owners": binary(arrays["owners"], INT4, "i"),
            "keys": binary(arrays["keys"], INT8, "q"),
        }
        assert as_bytes.pids(raw) == as_lists.pids(arrays)
        answer = as_bytes.decode(raw, sessions)
        assert answer == as_lists.decode(arrays, sessions)
        # The same bytes again (a new row of them): the very same answer.
        assert as_bytes.decode(dict(raw), sessions) is answer


@st.composite
def flood_polls(draw: st.DrawFn) -> list[tuple[list[tuple[int, int]], dict[int, Backend]]]:
    """Many locks held in the lock table's order, poll after poll a few taken
    or let go of in one place or here and there, a session now and then gone
    or another one behind its pid: the rows a changed flood answers."""
    rows = [(8 * pid, key) for pid in PIDS for key in range(1, 60)]
    sessions = {pid: backend(pid, idle_for=60) for pid in PIDS}
    polls = [(list(rows), dict(sessions))]
    for _ in range(draw(st.integers(1, 5))):
        at = draw(st.integers(0, len(rows)))
        gone = draw(st.integers(0, 4))
        taken = [
            (8 * draw(st.sampled_from(PIDS)) + draw(st.sampled_from((0, 1, 2))), 1000 + n)
            for n in range(draw(st.integers(0, 4)))
        ]
        rows = [row for row in rows[:at] + taken + rows[at + gone :] if row not in rows[:at]]
        if draw(st.booleans()):
            rows = [row for n, row in enumerate(rows) if n % draw(st.integers(7, 40))]
        if draw(st.integers(0, 5)) == 0:
            pid = draw(st.sampled_from(sorted(sessions) or PIDS))
            sessions = {**sessions, pid: replace(backend(pid, idle_for=60), backend_start=NOW)}
        if draw(st.integers(0, 5)) == 0:
            sessions = {pid: session for pid, session in sessions.items() if pid != PIDS[0]}
        polls.append((list(dict.fromkeys(rows)), dict(sessions)))
    return polls


def flood_arrays(rows: list[tuple[int, int]]) -> dict[str, bytes | None]:
    """The lock statement's arrays as the server sends them, of (owner, key) rows."""
    return {
        "owners": binary([owner for owner, _ in rows], INT4, "i"),
        "keys": binary([key for _, key in rows], INT8, "q"),
        "waitstarts": None,
        "prepared": None,
    }


@settings(max_examples=300, deadline=None)
@given(flood_polls())
def test_arrays_changed_in_a_stretch_decode_as_a_whole_answer_does(
    polls: list[tuple[list[tuple[int, int]], dict[int, Backend]]],
) -> None:
    decoder = LockDecoder()
    for rows, sessions in polls:
        arrays = flood_arrays(rows)
        fresh = decode_locks(listed(arrays), sessions)
        assert decoder.pids(arrays) == {owner >> 3 for owner, _ in rows}
        assert decoder.decode(arrays, sessions) == fresh
        assert decoder.ordered == tuple(fresh.values())


@settings(max_examples=200, deadline=None)
@given(flood_polls())
def test_holds_of_arrays_changed_in_a_stretch_are_those_of_a_rebuild(
    polls: list[tuple[list[tuple[int, int]], dict[int, Backend]]],
) -> None:
    decoder = LockDecoder()
    spliced, rebuilt = HoldTracker(GAP), HoldTracker(GAP)
    given: tuple[AdvisoryLock, ...] = ()
    for n, (rows, sessions) in enumerate(polls):
        now = NOW + timedelta(seconds=n)
        arrays = flood_arrays(rows)
        decoder.pids(arrays)
        decoder.decode(arrays, sessions)
        stretch = decoder.stretch if decoder.stretch and decoder.stretch[0] is given else None
        given = decoder.ordered
        ours = spliced.observe(given, sessions, now, read_at=now, spliced=stretch)
        copies = tuple(replace(lock) for lock in given)
        assert ours == rebuilt.observe(copies, sessions, now, read_at=now)
        assert same_holds(spliced, rebuilt, now)

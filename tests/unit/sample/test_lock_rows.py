"""The per-lock arrays of advisory_locks.sql come as the server's binary
bytes (``lock_cursor``); decoded, they are the locks their lists give, and
the same bytes again are the same answer with nothing decoded."""

from __future__ import annotations

import struct

from hypothesis import given, settings

from lockwatch.sample.lock_rows import LockDecoder, listed
from tests.unit.state.test_holds_incremental import Poll, poll_sequences

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

"""Where a poll's answer differs from the last one's: advisory_locks.sql's
per-lock arrays, as the server's binary bytes, compared from both ends.

The server lists the locks in the order of its lock table, where a lock
keeps its place while it is held: a poll that took or let go of a few locks
taken or released together differs from the last one in one stretch of the
arrays, found with a few comparisons of bytes (in C) instead of a Python
step per lock. Further apart (locks released here and there) the stretch
grows past what is worth it, and the answer is decoded as a whole."""

from __future__ import annotations

import struct
from dataclasses import dataclass

# An array's header in PostgreSQL's binary format: dimensions, null flag,
# element type, length, lower bound; then each element's length and value.
HEADER = struct.Struct(">iiiii")
OWNER, KEY = struct.Struct(">ii"), struct.Struct(">iq")  # an element of owners, of keys


@dataclass(frozen=True, slots=True)
class Splice:
    """The new answer as the last one with one stretch replaced: ``removed``
    elements from ``start`` on gave way to ``owners`` and ``keys``."""

    start: int
    removed: int
    owners: list[int]
    keys: list[int]


def length_of(array: bytes, element: struct.Struct) -> int | None:
    """How many elements a one-dimensional array without NULLs has (None: not such)."""
    if len(array) < HEADER.size:
        return None
    dimensions, nulls, _, length, _ = HEADER.unpack_from(array)
    fits = len(array) == HEADER.size + length * element.size
    return length if dimensions == 1 and not nulls and fits else None


def _alike_from_start(old: bytes, new: bytes, size: int, most: int) -> int:
    """How many elements of ``size`` bytes the arrays share at their start,
    at most ``most``: a binary search comparing only the stretch in doubt."""
    low, high = 0, most  # the first ``low`` are alike; no more than ``high`` are
    while low < high:
        middle = (low + high + 1) // 2
        at, to = HEADER.size + low * size, HEADER.size + middle * size
        if old[at:to] == new[at:to]:
            low = middle
        else:
            high = middle - 1
    return low


def _alike_from_end(old: bytes, new: bytes, size: int, most: int) -> int:
    """How many elements the arrays share at their end, at most ``most``."""
    low, high = 0, most
    while low < high:
        middle = (low + high + 1) // 2
        if (
            old[len(old) - middle * size : len(old) - low * size]
            == (new[len(new) - middle * size : len(new) - low * size])
        ):
            low = middle
        else:
            high = middle - 1
    return low


def splice(old: tuple[bytes, bytes], new: tuple[bytes, bytes], most: int) -> Splice | None:
    """The new (owners, keys) arrays as the old ones with one stretch
    replaced, when that stretch (elements removed and added) is at most
    ``most`` long; None otherwise, or when either is not a plain array."""
    old_owners, old_keys = old
    new_owners, new_keys = new
    before, after = length_of(old_owners, OWNER), length_of(new_owners, OWNER)
    if before is None or after is None:
        return None
    if length_of(old_keys, KEY) != before or length_of(new_keys, KEY) != after:
        return None
    start = _alike_from_start(old_owners, new_owners, OWNER.size, min(before, after))
    start = _alike_from_start(old_keys, new_keys, KEY.size, start)
    end = _alike_from_end(old_owners, new_owners, OWNER.size, min(before, after) - start)
    end = _alike_from_end(old_keys, new_keys, KEY.size, end)
    removed, added = before - start - end, after - start - end
    if removed + added > most:
        return None
    at = HEADER.size + start * OWNER.size
    owners = [value for _, value in OWNER.iter_unpack(new_owners[at : at + added * OWNER.size])]
    at = HEADER.size + start * KEY.size
    keys = [value for _, value in KEY.iter_unpack(new_keys[at : at + added * KEY.size])]
    return Splice(start, removed, owners, keys)


def holds_owner(owners: bytes, owner: int) -> bool:
    """Whether ``owner`` is an element of the owners array (searched in C)."""
    pattern = OWNER.pack(4, owner)
    at = owners.find(pattern, HEADER.size)
    while at != -1 and (at - HEADER.size) % OWNER.size:
        at = owners.find(pattern, at + 1)  # a match across two elements
    return at != -1

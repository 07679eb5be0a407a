"""The answer of advisory_locks.sql as locks: its arrays decoded, and a
memory of the last poll's answer that makes an unchanged one cost no work per
lock, and a changed one no Python step per lock it already knew.

The two arrays with an element per lock (``owners``, ``keys``) come from the
server as their binary bytes (``lock_cursor``): an answer equal to the last
is told by comparing bytes, and only a changed one is made into lists, by
psycopg's own array loader. A quiet poll of 50,000 locks then makes no
Python object per lock at all."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from itertools import compress, repeat
from operator import is_
from typing import Any, cast

import psycopg
from psycopg import abc
from psycopg.abc import Buffer
from psycopg.adapt import Loader
from psycopg.pq import Format

from lockwatch.model.lock_waits import LockRowFact, PreparedXact
from lockwatch.model.locks import AdvisoryLock, Backend, LockKey
from lockwatch.sample.lock_splice import KEY, Splice, holds_owner, length_of, splice

# Bits of the flags in the ``owners`` array of advisory_locks.sql.
PAIR_KEY, SHARED, WAITING = 1, 2, 4


# One element of advisory_locks.sql's arrays, with the session it belongs to:
# (owner, backend_start, key, wait_start); a prepared transaction's lock has
# its transaction's time in place of backend_start.
LockRow = tuple[int, datetime | None, int, datetime | None]
# The columns of advisory_locks.sql's row that say which locks there are.
LOCK_COLUMNS = ("owners", "keys", "waitstarts", "prepared")
FLAG_BITS = 3  # an owner is pid << FLAG_BITS | flags
FLAG_MASK = (1 << FLAG_BITS) - 1
HALF = 0xFFFFFFFF  # a key's low half: objid (a pair's key2)
# A stretch of the arrays decoded on its own (lock_splice) at most this long,
# or an eighth of the locks.
SPLICE_LOCKS = 256
# The per-lock arrays, by their elements' types: owners int4[], keys int8[].
PER_LOCK_COLUMNS = {"owners": "int4", "keys": "int8"}


class ArrayBytesLoader(Loader):
    """An array as the server sent it in binary: its bytes, not yet a list."""

    format = Format.BINARY

    def load(self, data: Buffer) -> bytes:
        return bytes(data)


def lock_cursor(conn: psycopg.Connection[Any]) -> psycopg.Cursor[Any]:
    """A cursor whose int4[] and int8[] columns come back as their bytes."""
    cursor = conn.cursor()
    for element in PER_LOCK_COLUMNS.values():
        cursor.adapters.register_loader(_array_oid(element), ArrayBytesLoader)
    return cursor


def _array_oid(element: str) -> int:
    return psycopg.adapters.types[element].array_oid


def _int_loaders() -> dict[str, abc.Loader]:
    """psycopg's own binary loader of each per-lock array."""
    loaders: dict[str, abc.Loader] = {}
    for column, element in PER_LOCK_COLUMNS.items():
        oid = _array_oid(element)
        loader = psycopg.adapters.get_loader(oid, Format.BINARY)
        assert loader is not None  # psycopg loads int4[] and int8[]
        loaders[column] = loader(oid)
    return loaders


_LOADERS = _int_loaders()


def _ints(column: str, value: Any) -> Any:
    """A per-lock array as a list, made from its bytes if it came as such."""
    loader = _LOADERS.get(column)
    return loader.load(value) if loader is not None and isinstance(value, bytes) else value


def listed(arrays: Mapping[str, Any]) -> dict[str, Any]:
    """``arrays`` with the per-lock arrays as lists."""
    return {column: _ints(column, value) for column, value in arrays.items()}


def other_rows(arrays: Mapping[str, Any]) -> list[LockRowFact]:
    """The rows of the locktypes some session waits on (none: no session
    waits on a lock but an advisory one), from ``others``: one text array a
    row. Few and rare, so made one by one."""
    return [_other_row(*row) for row in arrays.get("others") or ()]


def _other_row(
    pid: str,
    locktype: str,
    tag: str,
    mode: str,
    granted: str,
    waitstart: str | None,
    relation: str | None,
    prepared_vxid: str | None = None,
) -> LockRowFact:
    wait_start = None if waitstart is None else datetime.fromtimestamp(float(waitstart), UTC)
    return LockRowFact(
        int(pid),
        locktype,
        f"{locktype}:{tag}",
        mode,
        granted == "true",
        wait_start,
        relation,
        prepared_vxid,
    )


def decode_locks(
    arrays: Mapping[str, Any],
    backends: Mapping[int, Backend],
    known: Mapping[LockRow, AdvisoryLock] | None = None,
    prepared: Mapping[str, PreparedXact] | None = None,
) -> dict[LockRow, AdvisoryLock]:
    """The locks in advisory_locks.sql's row, by the raw values they came from.

    Locks of a pid missing from ``backends`` are left out: the session ended
    between the two queries, and its locks with it; so are locks with no pid
    whose prepared transaction is missing from ``prepared`` (by
    virtualtransaction). A lock found in ``known`` (the previous poll's
    answer) is that same object again, so that most of a poll over many
    long-held locks costs one lookup per lock.
    """
    known = known or {}
    prepared = prepared or {}
    decoded: dict[LockRow, AdvisoryLock] = {}
    owners = arrays["owners"]
    if owners is None:
        return decoded
    if arrays["waitstarts"] is None and not arrays.get("prepared"):
        held = _decode_held(owners, arrays["keys"], backends, known)
        if held is not None:
            return held
    waitstarts = iter(arrays["waitstarts"] or ())
    vxids = iter(arrays.get("prepared") or ())
    for owner, key in zip(owners, arrays["keys"], strict=True):
        pid, flags = owner >> FLAG_BITS, owner & FLAG_MASK
        wait_start = next(waitstarts, None) if flags & WAITING else None
        if not pid:
            xact = prepared.get(next(vxids, ""))
            if xact is not None:
                raw: LockRow = (owner, xact.prepared, key, None)
                unowned = _lock(xact.database, 0, key, flags)
                decoded[raw] = replace(unowned, prepared=xact)
            continue
        backend = backends.get(pid)
        if backend is None:
            continue
        raw = (owner, backend.backend_start, key, wait_start)
        lock = known.get(raw)
        if lock is None:
            # An advisory lock lives in the database its session is connected to.
            lock = _lock(backend.database, pid, key, flags, wait_start)
        decoded[raw] = lock
    return decoded


def _decode_held(
    owners: list[int],
    keys: list[int],
    backends: Mapping[int, Backend],
    known: Mapping[LockRow, AdvisoryLock],
) -> dict[LockRow, AdvisoryLock] | None:
    """``decode_locks`` when no lock waits or is a prepared transaction's,
    column by column through C (zip, map, compress) with Python only for the
    locks not in ``known``: a poll that changed one lock of 50,000 looks up
    the others without a Python step each. None when a session is missing
    (its locks are left out, lock by lock)."""
    start_of = {}  # each owner's session's backend_start: one per pid and flags
    for owner in set(owners):
        backend = backends.get(owner >> FLAG_BITS)
        if backend is None:
            return None
        start_of[owner] = backend.backend_start
    raws = list(zip(owners, map(start_of.__getitem__, owners), keys, repeat(None)))
    found: list[AdvisoryLock | None] = list(map(known.get, raws))
    for at in compress(range(len(raws)), map(is_, found, repeat(None))):
        owner, _, key, _ = raws[at]
        pid = owner >> FLAG_BITS
        # An advisory lock lives in the database its session is connected to.
        found[at] = _lock(backends[pid].database, pid, key, owner & FLAG_MASK)
    return dict(zip(raws, cast(list[AdvisoryLock], found), strict=True))


class LockDecoder:
    """``decode_locks`` with a memory of the last poll's row.

    When the arrays come back equal to the last poll's (a comparison of
    their bytes, or of lists, in C) and every session behind them is the same session in the
    same database, the answer is the last one again, the very same dict of
    the very same locks: a quiet poll costs no Python work per lock. Arrays
    that differ from the last in one short stretch (``lock_splice``) are the
    last answer with that stretch decoded: a Python step per lock taken or
    released. Anything else, or a lock of a prepared transaction (its age
    moves), decodes the row as ``decode_locks`` does, reusing the locks seen
    unchanged. ``ordered``: the answer's locks in the arrays' order.
    """

    def __init__(self) -> None:
        self.locks: dict[LockRow, AdvisoryLock] = {}
        self.ordered: tuple[AdvisoryLock, ...] = ()
        # How ``ordered`` came from the one before, when only a stretch was
        # decoded: that tuple, where the stretch starts, how many went and came.
        self.stretch: tuple[tuple[AdvisoryLock, ...], int, int, int] | None = None
        self._columns: tuple[Any, ...] | None = None
        self._owners: dict[int, tuple[datetime | None, str | None]] = {}
        # The owners array last asked about, the equal one its pids were
        # taken from, and those pids.
        self._asked: list[int] | bytes | None = None
        self._owner_array: list[int] | bytes | None = None
        self._pids: frozenset[int] = frozenset()
        # The last answer's raw rows in the arrays' order, while each element
        # is one lock (None: not so), with its (owners, keys) arrays; and the
        # stretch the owners array last asked about differs from them in.
        self._raws: list[LockRow] | None = None
        self._base: tuple[bytes, bytes] | None = None
        self._splice: Splice | None = None
        self._splice_of: tuple[Any, Any] = (None, None)  # the arrays it was found in

    def pids(self, arrays: Mapping[str, Any]) -> frozenset[int]:
        """The pids of the sessions behind ``arrays`` (a prepared
        transaction's locks have none). An owners array equal to the last one
        has the same pids, and stands for it in ``decode``'s comparison, which
        then sees the very same one."""
        owners = arrays["owners"] or []
        if owners is not self._asked:
            self._asked = owners
            if owners != self._owner_array:
                self._owner_array = owners
                self._splice = self._spliced(owners, arrays.get("keys"), arrays.get("waitstarts"))
                self._splice_of = (owners, arrays.get("keys"))
                self._pids = frozenset(self._new_pids(owners))
        return self._pids

    def _spliced(self, owners: Any, keys: Any, waitstarts: Any) -> Splice | None:
        """Where ``owners`` and ``keys`` differ from the last answer's, when
        in one short stretch and the last answer's elements are one lock each."""
        if self._raws is None or self._base is None or waitstarts:
            return None
        if not isinstance(owners, bytes) or not isinstance(keys, bytes):
            return None
        return splice(self._base, (owners, keys), max(SPLICE_LOCKS, len(self._raws) // 8))

    def _new_pids(self, owners: Any) -> set[int]:
        changed = self._splice
        if changed is None:
            pids = {owner >> FLAG_BITS for owner in set(_ints("owners", owners))}
        else:
            assert self._raws is not None  # spliced
            gone = {raw[0] for raw in self._raws[changed.start : changed.start + changed.removed]}
            taken = {owner >> FLAG_BITS for owner in changed.owners}
            pids = set(self._pids) | taken
            for pid in {owner >> FLAG_BITS for owner in gone} - taken:
                flagged = (pid << FLAG_BITS | flags for flags in range(FLAG_MASK + 1))
                if not any(holds_owner(owners, owner) for owner in flagged):
                    pids.discard(pid)  # its last lock let go of
        pids.discard(0)  # the locks of prepared transactions
        return pids

    def decode(
        self,
        arrays: Mapping[str, Any],
        backends: Mapping[int, Backend],
        prepared: Mapping[str, PreparedXact] | None = None,
    ) -> dict[LockRow, AdvisoryLock]:
        """The locks of ``arrays``."""
        pids = self.pids(arrays)
        columns = (self._owner_array, *(arrays.get(name) for name in LOCK_COLUMNS[1:]))
        owners = {
            pid: (backend.backend_start, backend.database)
            for pid in pids
            if (backend := backends.get(pid)) is not None
        }
        if prepared or columns != self._columns or owners != self._owners:
            if prepared or not self._apply(arrays, backends, owners):
                self._decoded(arrays, decode_locks(listed(arrays), backends, self.locks, prepared))
            self._columns = None if prepared else columns
            self._owners = owners
        return self.locks

    def _decoded(self, arrays: Mapping[str, Any], locks: dict[LockRow, AdvisoryLock]) -> None:
        """A whole answer decoded: one lock per element of its arrays (in
        their order) unless a lock waits, is a prepared transaction's, or its
        session was gone."""
        self.locks, self.ordered, self.stretch = locks, tuple(locks.values()), None
        owners, keys = arrays["owners"], arrays.get("keys")
        whole = not arrays.get("waitstarts") and not arrays.get("prepared")
        self._raws, self._base = None, None
        if not whole or not isinstance(owners, bytes) or not isinstance(keys, bytes):
            return
        if len(locks) == length_of(keys, KEY):  # none left out
            self._raws, self._base = list(locks), (owners, keys)

    def _apply(
        self,
        arrays: Mapping[str, Any],
        backends: Mapping[int, Backend],
        owners: Mapping[int, tuple[datetime | None, str | None]],
    ) -> bool:
        """The last answer with the stretch ``pids`` found replaced; False
        when it cannot be (no such stretch, a session of the last answer's
        locks is another now, a lock waits or is listed twice)."""
        owner_array, key_array = arrays["owners"], arrays.get("keys")
        if self._splice_of != (owner_array, key_array):  # pids() saw other arrays
            self._splice = self._spliced(owner_array, key_array, arrays.get("waitstarts"))
        changed, raws = self._splice, self._raws
        if changed is None or raws is None or arrays.get("prepared"):
            return False
        # Each session of the last answer that holds on is the same one.
        if any(pid in self._pids and owners.get(pid) != was for pid, was in self._owners.items()):
            return False
        gone = raws[changed.start : changed.start + changed.removed]
        new_raws: list[LockRow] = []
        new_locks: list[AdvisoryLock] = []
        for owner, key in zip(changed.owners, changed.keys, strict=True):
            backend = backends.get(owner >> FLAG_BITS)
            if backend is None or owner & WAITING:
                return False  # its locks are left out: decoded as a whole
            raw: LockRow = (owner, backend.backend_start, key, None)
            lock = self.locks.get(raw) if raw in gone else None
            if lock is None and raw in self.locks:
                return False  # a lock listed twice: decoded as a whole
            new_raws.append(raw)
            new_locks.append(
                lock or _lock(backend.database, owner >> FLAG_BITS, key, owner & FLAG_MASK)
            )
        locks = self.locks.copy()
        for raw in set(gone).difference(new_raws):
            del locks[raw]
        locks.update(zip(new_raws, new_locks, strict=True))
        end = changed.start + changed.removed
        self._raws = [*raws[: changed.start], *new_raws, *raws[end:]]
        before = self.ordered
        self.ordered = (*before[: changed.start], *new_locks, *before[end:])
        self.stretch = (before, changed.start, changed.removed, len(new_locks))
        self.locks, self._base = locks, (arrays["owners"], arrays["keys"])
        return True

    def nothing(self) -> dict[LockRow, AdvisoryLock]:
        """No advisory lock at all. Remembered as such: the same locks coming
        back at the next poll are decoded again, not taken for the answer
        before this one."""
        if self.locks or self._columns is not None:
            self.locks, self._columns, self._owners = {}, None, {}
            self.ordered, self._raws, self._base, self.stretch = (), None, None, None
        return self.locks


def _lock(
    database: str | None,
    pid: int,
    key: int,
    flags: int,
    wait_start: datetime | None = None,
) -> AdvisoryLock:
    return AdvisoryLock(
        database=database or "",
        # The key's halves as pg_locks shows them: classid high, objid low.
        key=LockKey.from_pg_locks(key >> 32 & HALF, key & HALF, 2 if flags & PAIR_KEY else 1),
        mode="ShareLock" if flags & SHARED else "ExclusiveLock",
        granted=not flags & WAITING,
        pid=pid,
        wait_start=wait_start,
    )

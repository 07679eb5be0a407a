"""Hold times, measured from first sight.

``pg_locks`` has no grant time, so lockwatch remembers when it first saw each
backend hold (or wait for) each key in each mode. A backend is named by pid +
backend_start, because the server reuses pids. The memory is saved in the
state dir so that a restart neither forgets an hour-long hold nor invents one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from itertools import compress, repeat
from operator import attrgetter, is_, itemgetter, not_
from typing import Any, cast

from lockwatch.model.holdings import LockChange
from lockwatch.model.locks import AdvisoryLock, Backend, LockKey
from lockwatch.state.hold_proofs import (
    Hold,
    held_throughout,
    outside_transaction,
    taken_by,
    unchanged,
)

# How far the wall clock may stray from the monotonic one between two polls
# before it counts as a jump (NTP slews far slower).
JUMP_SLACK = timedelta(seconds=1)
ObservationKey = tuple[int, str, str, bool, int, int, str, bool]
# A lock as the sampler gave it, as filled in, its observation and its hold.
_Filled = tuple[AdvisoryLock, AdvisoryLock, ObservationKey, Hold]
# The parts of a _Filled and of a Hold, for going through them column by column.
_LOCK, _FILLED, _KEY, _HOLD = (itemgetter(n) for n in range(4))
_XACT, _SESSION = itemgetter(1), itemgetter(2)
_PID = attrgetter("pid")
# Locks as an earlier tuple of them with one stretch replaced: that tuple,
# where the stretch starts, how many of its locks went and how many came.
Spliced = tuple[tuple[AdvisoryLock, ...], int, int, int]
# A hold (or wait) that ended: its observation, first and last sighting.
Ended = tuple[ObservationKey, datetime, datetime]


def _observation(lock: AdvisoryLock, started: str) -> ObservationKey:
    return (
        lock.pid,
        started,
        lock.database,
        lock.key.pair,
        lock.key.first,
        lock.key.second,
        lock.mode,
        lock.granted,
    )


class HoldTracker:
    """Remembers first sightings across polls (and restarts) for one target."""

    def __init__(self, continuity_gap: float) -> None:
        # A lock seen again after a gap no longer than this is taken to have
        # been held throughout; past it, only proof from the session's state
        # keeps the old first sighting.
        self.continuity_gap = continuity_gap
        self._holds: dict[ObservationKey, Hold] = {}
        # Whether the set of holds changed since the last dump (a flag, not a
        # copy of 200,000 keys compared every poll).
        self._dump_due = False
        # When the sightings were last confirmed against the server, all of
        # them at once; a save while sampling fails must not vouch for locks
        # nobody has seen since.
        self._observed_at: datetime | None = None
        self._monotonic_at: float | None = None  # the monotonic clock at that poll
        # The last poll's locks by id(): the sampler hands out the very same
        # object for a lock it saw unchanged (same session, key, mode and
        # wait), and such a lock keeps its filled-in copy without a lookup.
        self._filled: dict[int, _Filled] = {}
        # The same entries in the last poll's locks' order.
        self._entries: list[_Filled] = []
        # The last poll's locks as given and as filled in, and the
        # transactions its holds that may be a transaction's were seen in:
        # the sampler hands out the very same tuple for an unchanged answer,
        # and while those transactions go on every lock is unchanged.
        self._given: tuple[AdvisoryLock, ...] | None = None
        self._result: tuple[AdvisoryLock, ...] = ()
        self._in_xact: frozenset[tuple[int, datetime | None]] = frozenset()
        # What the last observe saw end and begin (the hold history reads them).
        self.ended: list[Ended] = []
        self.began: list[ObservationKey] = []
        # How the last observe's locks came from the poll's before (None: not
        # told, as when most changed or the last poll's are not trusted).
        self.change: LockChange[AdvisoryLock] | None = None

    def __len__(self) -> int:
        return len(self._holds)

    def observe(
        self,
        locks: tuple[AdvisoryLock, ...],
        backends: Mapping[int, Backend],
        now: datetime,
        read_at: datetime | None = None,
        monotonic: float | None = None,
        spliced: Spliced | None = None,
    ) -> tuple[AdvisoryLock, ...]:
        """Fill ``first_seen`` and ``session_level`` on every lock and forget
        locks no longer present. ``read_at`` is when the server read the locks
        (its statement_timestamp(), on lockwatch's clock); sessions are read
        after it. With ``monotonic``, hold times follow the monotonic clock
        through a jump of the wall clock (``now``). ``spliced``: the locks as
        an earlier tuple with one stretch replaced, when the sampler knows."""
        self._realign(now, monotonic, backends)
        last_seen = self._observed_at
        gap = timedelta(seconds=self.continuity_gap)
        bridged = last_seen is not None and now - last_seen <= gap
        self.ended, self.began, self.change = [], [], None
        if bridged and locks is self._given and not self._moved_on(backends):
            # What the loop below would find lock by lock: each one unchanged.
            self._observed_at = now
            return self._result
        trusted = bridged and self._filled and len(self._holds) == len(self._filled)
        follows = spliced if spliced is not None and spliced[0] is self._given else None
        if trusted and follows and not self._moved_on(backends):
            self._observe_spliced(locks, follows, backends, (now, read_at))
            return self._result
        # Column by column through C (map, zip, compress), with Python only for
        # the locks not seen unchanged: a poll that changed one lock of 50,000
        # takes no Python step for the others.
        ids = list(map(id, locks))
        entries: list[_Filled | None] = (
            self._unchanged_entries(ids, backends) if bridged else [None] * len(ids)
        )
        missing = list(compress(range(len(entries)), map(is_, entries, repeat(None))))
        if trusted and 2 * len(missing) <= len(entries):
            self._observe_few(locks, entries, missing, backends, (now, read_at), ids=ids)
            return self._result
        kept = list(filter(None, entries))
        seen: dict[ObservationKey, Hold] = dict(zip(map(_KEY, kept), map(_HOLD, kept), strict=True))
        started: dict[int, str] = {}
        for at in missing:
            lock = locks[at]
            key = _observation(lock, self._started(lock, backends, started))
            hold = seen.get(key) or self._begin(key, lock, backends, bridged, now, read_at)
            seen[key] = hold
            entries[at] = _filled(lock, key, hold)
        filled = cast(list[_Filled], entries)
        # Every lock unchanged since the last poll, and as many: nothing ended.
        if last_seen is not None and not (len(kept) == len(seen) == len(self._holds)):
            gone = compress(self._holds.items(), map(not_, map(seen.__contains__, self._holds)))
            self.ended.extend((key, hold[0], last_seen) for key, hold in gone)
        # Let go of this pass's tables before the next poll's are built: at
        # 200,000 locks each is some 10 MB more at the poll's peak.
        del kept, seen
        self._remember(locks, ids, filled, now)
        return self._result

    def _observe_spliced(
        self,
        locks: tuple[AdvisoryLock, ...],
        spliced: Spliced,
        backends: Mapping[int, Backend],
        at: tuple[datetime, datetime | None],
    ) -> None:
        """``observe`` of locks that are the last poll's with one stretch
        replaced (``spliced``, as the sampler tells): the entries of the rest
        are the last poll's, shifted, without a pass over them."""
        _, start, removed, added = spliced
        old = self._entries
        gone = old[start : start + removed]
        entries: list[_Filled | None] = [*old[:start], *([None] * added), *old[start + removed :]]
        for position in range(start, start + added):
            entry = self._filled.get(id(locks[position]))
            if entry is not None and any(entry is was for was in gone):
                entries[position] = entry  # a lock of the stretch held on, handed on again
                gone = [was for was in gone if was is not entry]
        missing = [
            position for position in range(start, start + added) if entries[position] is None
        ]
        self._observe_few(locks, entries, missing, backends, at, (gone, start, removed))

    def _observe_few(
        self,
        locks: tuple[AdvisoryLock, ...],
        entries: list[_Filled | None],
        missing: list[int],
        backends: Mapping[int, Backend],
        at: tuple[datetime, datetime | None],
        stretch: tuple[list[_Filled], int, int] | None = None,
        ids: list[int] | None = None,
    ) -> None:
        """``observe`` when at most half the locks are not the last poll's
        unchanged: its holds and entries are changed in place, a Python step
        per lock released or taken, and what changed is told (``change``).
        ``stretch``: the entries gone, where and how many (``_observe_spliced``);
        else ``ids``, the locks' ids."""
        now, read_at = at
        last_seen = self._observed_at
        assert last_seen is not None  # bridged
        seen: dict[ObservationKey, Hold] = {}
        started: dict[int, str] = {}
        # The last poll's entries of locks now gone or held anew.
        released: list[_Filled] = [] if stretch is None else stretch[0]
        for at_ in missing:
            lock = locks[at_]
            old = None if stretch is not None else self._filled.get(id(lock))
            if old is not None:
                released.append(old)  # seen again, in another transaction
            key = _observation(lock, self._started(lock, backends, started))
            hold = seen.get(key) or self._begin(key, lock, backends, True, now, read_at)
            seen[key] = hold
            entries[at_] = _filled(lock, key, hold)
        if stretch is None and len(self._filled) > len(entries) - len(missing) + len(released):
            assert ids is not None  # given when no stretch is
            present = set(ids)  # some gone: the ints of ``ids`` again, not new ones
            released += compress(
                self._filled.values(), map(not_, map(present.__contains__, self._filled))
            )
        for entry in released:
            del self._filled[id(entry[0])]
            if entry[2] not in seen:
                del self._holds[entry[2]]
                self.ended.append((entry[2], entry[3][0], last_seen))
        taken = [cast(_Filled, entries[at_]) for at_ in missing]
        self._dump_due = self._dump_due or bool(self.ended) or not seen.keys() <= self._holds.keys()
        self._filled.update(zip((id(locks[at_]) for at_ in missing), taken, strict=True))
        self._holds.update(seen)
        before, self._given, self._observed_at = self._result, locks, now
        self._entries = cast(list[_Filled], entries)
        if stretch is None:
            self._result = tuple(map(_FILLED, self._entries))
        else:
            start, removed = stretch[1], stretch[2]
            added = len(entries) - len(before) + removed
            new = map(_FILLED, self._entries[start : start + added])
            self._result = (*before[:start], *new, *before[start + removed :])
        if not all(map(_SESSION, map(_HOLD, (*released, *taken)))):
            self._in_xact = _in_transaction(self._filled.values())
        self.change = LockChange(before, tuple(map(_FILLED, released)), tuple(map(_FILLED, taken)))

    def _unchanged_entries(
        self, ids: list[int], backends: Mapping[int, Backend]
    ) -> list[_Filled | None]:
        """The last poll's entry of each lock it saw unchanged, None for the
        others. Such a lock is the very object the last poll had, so its id
        finds it (no other object has that id: the last poll's locks are alive
        in ``_filled``); a hold that may be a transaction's stays only while
        its transaction goes on."""
        entries: list[_Filled | None] = list(map(self._filled.get, ids))
        moved_on = self._moved_on(backends) if self._filled else frozenset()
        if not moved_on:
            return entries
        return [
            entry
            if entry is None
            or entry[0].pid not in moved_on
            or unchanged(entry[3], backends.get(entry[0].pid))
            else None
            for entry in entries
        ]

    def _remember(
        self, locks: tuple[AdvisoryLock, ...], ids: list[int], filled: list[_Filled], now: datetime
    ) -> None:
        """This poll's holds, in the locks' order as a lock-by-lock pass makes them."""
        seen = dict(zip(map(_KEY, filled), map(_HOLD, filled), strict=True))
        self._dump_due = self._dump_due or not (
            len(seen) == len(self._holds) and all(map(self._holds.__contains__, seen))
        )
        self._holds = seen
        self._filled = dict(zip(ids, filled, strict=True))
        self._entries = filled
        self._observed_at = now
        self._given, self._result = locks, tuple(map(_FILLED, filled))
        self._in_xact = _in_transaction(filled)

    @staticmethod
    def _started(
        lock: AdvisoryLock, backends: Mapping[int, Backend], started: dict[int, str]
    ) -> str:
        """What names the holder of ``lock`` with its pid: its session's
        backend_start (``started`` keeps them for the poll), or, with no
        session, the prepared transaction."""
        if lock.prepared is not None:
            return f"prepared {lock.prepared.transaction}"
        if lock.pid not in started:
            backend = backends.get(lock.pid)
            begun = backend.backend_start if backend else None
            started[lock.pid] = begun.isoformat() if begun else ""
        return started[lock.pid]

    def _begin(
        self,
        key: ObservationKey,
        lock: AdvisoryLock,
        backends: Mapping[int, Backend],
        bridged: bool,
        now: datetime,
        read_at: datetime | None,
    ) -> Hold:
        """The hold of a lock seen for the first time this poll, noted as begun
        when it is new."""
        hold = self._hold(key, lock, backends.get(lock.pid), bridged, now, read_at)
        self._note_start(key, hold)
        return hold

    def _moved_on(self, backends: Mapping[int, Backend]) -> frozenset[int]:
        """The pids of holds that may be a transaction's whose session is gone
        or in another transaction than the one they were seen in (none: every
        such hold is ``_unchanged``, all of them at once)."""
        return frozenset(
            pid
            for pid, xact in self._in_xact
            if (backend := backends.get(pid)) is None
            or backend.xact_start is None
            or backend.xact_start != xact
        )

    def _realign(
        self, now: datetime, monotonic: float | None, backends: Mapping[int, Backend]
    ) -> None:
        """Move what is remembered by how far the wall clock jumped since the
        last poll, beyond what the monotonic clock says passed: a hold is as
        long as it really was, whatever the wall clock did meanwhile.

        The server's times come moved onto the wall clock by an offset
        measured again after the jump, which differs from ``jump`` by a few
        milliseconds: a remembered transaction start is taken from its
        session as seen now when it is the same one within JUMP_SLACK, or an
        active holder's transaction would look new and its hold restart."""
        if monotonic is None:
            return
        last, self._monotonic_at = self._monotonic_at, monotonic
        if last is None or self._observed_at is None:
            return
        jump = (now - self._observed_at) - timedelta(seconds=monotonic - last)
        if abs(jump) <= JUMP_SLACK:
            return

        def moved(pid: int, xact: datetime | None) -> datetime | None:
            if xact is None:
                return None
            seen = backends.get(pid)
            current = None if seen is None else seen.xact_start
            if current is not None and abs(current - (xact + jump)) <= JUMP_SLACK:
                return current
            return xact + jump

        self._holds = {
            key: (first_seen + jump, moved(key[0], xact), session)
            for key, (first_seen, xact, session) in self._holds.items()
        }
        self._observed_at += jump
        self._filled, self._given = {}, None

    def _note_start(self, key: ObservationKey, hold: Hold) -> None:
        """A hold that began (and the one it replaces, when a transaction
        lock's backend took the key again in a new transaction)."""
        old = self._holds.get(key)
        if old is None or old[0] != hold[0]:
            self.began.append(key)
            if old is not None and self._observed_at is not None:
                self.ended.append((key, old[0], self._observed_at))

    def _hold(
        self,
        key: ObservationKey,
        lock: AdvisoryLock,
        backend: Backend | None,
        bridged: bool,
        now: datetime,
        read_at: datetime | None,
    ) -> Hold:
        """The hold ``lock`` belongs to: the remembered one if it still holds
        (the gap since the last poll was bridged, or the session proves the
        lock was held throughout) and the lock can have outlived every
        transaction since; else a new one, taken at the latest by now.

        A transaction-level lock ends with its transaction: seen again in
        another transaction, and never seen outside one, it is a new hold.
        """
        xact = backend.xact_start if backend is not None else None
        outside = outside_transaction(lock, backend, read_at)
        old = self._holds.get(key)
        if old is not None and (bridged or held_throughout(backend, self._observed_at)):
            first_seen, old_xact, session = old
            if session:
                # A session lock outlives any transaction: which one its
                # session has open says nothing of it, and is not followed
                # (as for a lock the sampler saw unchanged).
                return old
            if outside or old_xact == xact:
                return (first_seen, xact, outside)
        return (taken_by(lock, backend, now), xact, outside)

    def changed_since_dump(self) -> bool:
        return self._dump_due

    def dump(self, now: datetime) -> dict[str, Any]:
        """First sightings, dated by the last poll that saw them (``now`` if
        none has). ``last_seen`` is stored once for all: the file only needs
        rewriting when the set of locks changes.

        Locks of one session taken in one go share everything but their key,
        so they are stored once with their keys listed: 200,000 locks were a
        37 MB file, one entry each; as a few sessions' lists they are a few MB
        at most."""
        self._dump_due = False
        saved_at = self._observed_at or now
        shared: dict[tuple[Any, ...], list[int | str]] = {}
        for key, (first_seen, xact, session) in self._holds.items():
            pid, started, database, pair, first, second, mode, granted = key
            alike = (pid, started, database, mode, granted, first_seen, xact, session)
            # A bigint key as a JSON number: no string to make for each of 200,000.
            shown = LockKey(pair, first, second).render() if pair else first
            shared.setdefault(alike, []).append(shown)
        return {
            "saved_at": saved_at.isoformat(),
            "held": [
                {
                    "pid": pid,
                    "backend_start": started,
                    "database": database,
                    "mode": mode,
                    "granted": granted,
                    "first_seen": first_seen.isoformat(),
                    "xact_start": xact.isoformat() if xact else None,
                    "session_level": session,
                    "keys": keys,
                }
                for (pid, started, database, mode, granted, first_seen, xact, session), keys in (
                    shared.items()
                )
            ],
        }

    def load(self, document: dict[str, Any]) -> None:
        """Restore a dump (or one of the one-entry-per-lock files before it);
        malformed entries are dropped, not guessed at."""
        restored: dict[ObservationKey, Hold] = {}
        try:
            saved_at = _aware(document["saved_at"])
            if "held" in document:
                entries = [
                    {**entry, "key": key} for entry in document["held"] for key in entry["keys"]
                ]
            else:
                entries = list(document["locks"])
        except (KeyError, TypeError, ValueError):
            return
        for entry in entries:
            try:
                key_value = LockKey.parse(str(entry["key"]))
                key: ObservationKey = (
                    int(entry["pid"]),
                    str(entry["backend_start"]),
                    str(entry["database"]),
                    key_value.pair,
                    key_value.first,
                    key_value.second,
                    str(entry["mode"]),
                    bool(entry["granted"]),
                )
                first_seen = _aware(entry["first_seen"])
                xact = _aware(entry["xact_start"]) if entry.get("xact_start") else None
            except (KeyError, TypeError, ValueError):
                continue
            # A file from before transactions were told apart vouches for the hold.
            session = bool(entry.get("session_level", True))
            restored[key] = (min(first_seen, saved_at), xact, session)
        self._holds = restored
        self._filled, self._given = {}, None
        self._dump_due = False
        self._observed_at = saved_at
        self._monotonic_at = None  # another process: its monotonic clock is not ours


def _filled(lock: AdvisoryLock, key: ObservationKey, hold: Hold) -> _Filled:
    return (lock, replace(lock, first_seen=hold[0], session_level=hold[2]), key, hold)


def _in_transaction(filled: Iterable[_Filled]) -> frozenset[tuple[int, datetime | None]]:
    """The (pid, xact_start) of the holds that may be a transaction's."""
    entries = tuple(filled)
    holds = tuple(map(_HOLD, entries))
    return frozenset(
        compress(
            zip(map(_PID, map(_LOCK, entries)), map(_XACT, holds), strict=True),
            map(not_, map(_SESSION, holds)),
        )
    )


def _aware(text: Any) -> datetime:
    """A saved timestamp; one without a zone cannot be compared with the clock."""
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError(f"timestamp without a time zone: {text!r}")
    return moment

"""Hold times, measured from first sight.

``pg_locks`` has no grant time, so lockwatch remembers when it first saw each
backend hold (or wait for) each key in each mode. A backend is named by pid +
backend_start, because the server reuses pids. The memory is saved in the
state dir so that a restart neither forgets an hour-long hold nor invents one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from lockwatch.model import AdvisoryLock, Backend, LockKey

ObservationKey = tuple[int, str, str, bool, int, int, str, bool]
IDLE_STATES = frozenset({"idle", "idle in transaction", "idle in transaction (aborted)"})


def _observation(lock: AdvisoryLock, backend: Backend | None) -> ObservationKey:
    started = backend.backend_start.isoformat() if backend and backend.backend_start else ""
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


@dataclass(frozen=True, slots=True)
class Sighting:
    first_seen: datetime
    last_seen: datetime


class HoldTracker:
    """Remembers first sightings across polls (and restarts) for one target."""

    def __init__(self, continuity_gap: float) -> None:
        # A lock seen again after a gap no longer than this is taken to have
        # been held throughout; past it, only proof from the session's state
        # keeps the old first sighting.
        self.continuity_gap = continuity_gap
        self._sightings: dict[ObservationKey, Sighting] = {}
        self._dumped_keys: frozenset[ObservationKey] = frozenset()
        # When the sightings were last confirmed against the server; a save
        # while sampling fails must not vouch for locks nobody has seen since.
        self._observed_at: datetime | None = None

    def __len__(self) -> int:
        return len(self._sightings)

    def observe(
        self, locks: tuple[AdvisoryLock, ...], backends: Mapping[int, Backend], now: datetime
    ) -> tuple[AdvisoryLock, ...]:
        """Fill ``first_seen`` on every lock and forget locks no longer present."""
        seen: dict[ObservationKey, Sighting] = {}
        filled: list[AdvisoryLock] = []
        for lock in locks:
            backend = backends.get(lock.pid)
            key = _observation(lock, backend)
            previous = seen.get(key) or self._sightings.get(key)
            first_seen = now
            if previous is not None and self._continuous(previous, backend, now):
                first_seen = previous.first_seen
            seen[key] = Sighting(first_seen, now)
            filled.append(replace(lock, first_seen=first_seen))
        self._sightings = seen
        self._observed_at = now
        return tuple(filled)

    def _continuous(self, previous: Sighting, backend: Backend | None, now: datetime) -> bool:
        # The same rule holds after a restart and after an outage of the
        # target: a gap lockwatch did not see through is bridged only by proof.
        if now - previous.last_seen <= timedelta(seconds=self.continuity_gap):
            return True
        # Taking the lock again would have meant running SQL, which moves
        # state_change; an idle session unchanged since we last saw it has
        # held the lock all along.
        return (
            backend is not None
            and backend.state in IDLE_STATES
            and backend.state_change is not None
            and backend.state_change <= previous.last_seen
        )

    def changed_since_dump(self) -> bool:
        return self._dumped_keys != frozenset(self._sightings)

    def dump(self, now: datetime) -> dict[str, Any]:
        """First sightings, dated by the last poll that saw them (``now`` if
        none has). ``last_seen`` is stored once for all: the file only needs
        rewriting when the set of locks changes."""
        self._dumped_keys = frozenset(self._sightings)
        saved_at = self._observed_at or now
        return {
            "saved_at": saved_at.isoformat(),
            "locks": [
                {
                    "pid": key[0],
                    "backend_start": key[1],
                    "database": key[2],
                    "key": LockKey(key[3], key[4], key[5]).render(),
                    "mode": key[6],
                    "granted": key[7],
                    "first_seen": sighting.first_seen.isoformat(),
                }
                for key, sighting in self._sightings.items()
            ],
        }

    def load(self, document: dict[str, Any]) -> None:
        """Restore a dump; malformed entries are dropped, not guessed at."""
        restored: dict[ObservationKey, Sighting] = {}
        try:
            saved_at = _aware(document["saved_at"])
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
            except (KeyError, TypeError, ValueError):
                continue
            restored[key] = Sighting(min(first_seen, saved_at), saved_at)
        self._sightings = restored
        self._dumped_keys = frozenset(restored)
        self._observed_at = saved_at


def _aware(text: Any) -> datetime:
    """A saved timestamp; one without a zone cannot be compared with the clock."""
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError(f"timestamp without a time zone: {text!r}")
    return moment

"""Waiter-seconds on locks of other locktypes than advisory, counted poll
after poll per database, locktype and relation: the time sessions spent
blocked, which says how bad a wait was where a count of waiting sessions
says nothing (no count is "too many").

Bounded: a target's first RELATIONS_NAMED relations get series of their own,
the rest are counted as OTHER; a relation keeps its series once it has one,
so every series only grows, as a Prometheus counter must."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from lockwatch.model.lock_waits import LockWait
from lockwatch.model.locks import Backend

RELATIONS_NAMED = 20  # relations with series of their own per target
OTHER = "(other)"
NO_RELATION = ""  # a virtualxid wait, or a transaction id with no row named

# (database, locktype, relation) -> seconds
WaiterSecondsKey = tuple[str, str, str]


class WaiterSeconds:
    """The waiter-seconds counted so far. Each poll adds, for each wait it
    sees, the time since the last poll (or since the wait began, if later);
    a wait the server does not date (before PostgreSQL 14) counts from the
    first poll that saw it. What a wait spent after the last poll that saw
    it is not counted: a poll's interval is the resolution."""

    def __init__(self) -> None:
        self.totals: dict[WaiterSecondsKey, float] = {}
        self._named: set[str] = set()
        self._last: datetime | None = None

    def observe(
        self, waits: Iterable[LockWait], backends: Mapping[int, Backend], now: datetime
    ) -> None:
        last, self._last = self._last, now
        for wait in waits:
            start = wait.wait_start
            if last is None and start is None:
                continue  # neither dated nor seen before: nothing known yet
            since = max(filter(None, (start, last)))
            seconds = (now - since).total_seconds()
            if seconds <= 0:
                continue
            backend = backends.get(wait.pid)
            database = (backend.database if backend is not None else None) or ""
            key = (database, wait.locktype, self._relation(wait.relation))
            self.totals[key] = self.totals.get(key, 0.0) + seconds

    def _relation(self, relation: str | None) -> str:
        if relation is None:
            return NO_RELATION
        if relation not in self._named and len(self._named) < RELATIONS_NAMED:
            self._named.add(relation)
        return relation if relation in self._named else OTHER

    def published(self) -> dict[WaiterSecondsKey, float]:
        return dict(self.totals)

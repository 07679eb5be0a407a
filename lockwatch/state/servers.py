"""The servers the daemon's targets read, and which target judges the
advisory locks of which database (the rule is ``model/servers.py``'s).

Each target's session takes a seat here: it says which server and database it
reached when it connects, and asks, before each lock read, which databases to
read. The pollers of different targets ask at once, so the map is guarded by
a lock; an answer is kept until a place changes, and worked out from the
targets that may share the asker's server only (its address or its system
identifier), so a fleet of servers costs each read a few steps, not a walk.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from functools import lru_cache

from lockwatch.model.servers import (
    WHOLE_SERVER,
    LockScope,
    ServerIdentity,
    ServerPlace,
    lock_scope,
)
from lockwatch.settings.servers import server_and_database
from lockwatch.settings.targets import Target

log = logging.getLogger(__name__)

# How stale the time a server was last seen up may get before a read renews
# it (it tells a replica from a restarted server: model/servers.py).
SEEN_REFRESH = timedelta(minutes=1)


class ServerMap:
    """Every target's place, in the config's order."""

    def __init__(self, targets: Iterable[Target] = ()) -> None:
        self._lock = threading.Lock()
        self._order: dict[str, int] = {}
        self._places: dict[str, ServerPlace] = {}
        self._by_address: dict[str, set[str]] = {}
        self._by_system: dict[int | None, set[str]] = {}  # None: not known
        self._generation = 0
        self.arrange(targets)

    def arrange(self, targets: Iterable[Target]) -> None:
        """The targets now, in the config's order (at start, on each reload):
        a target whose DSN names the same server and database keeps what its
        session said."""
        with self._lock:
            places: dict[str, ServerPlace] = {}
            for target in targets:
                place = ServerPlace(target.name, *_where(target.dsn))
                old = self._places.get(target.name)
                if old is not None and (old.address, old.database) == (
                    place.address,
                    place.database,
                ):
                    place = old
                places[target.name] = place
            self._places = places
            self._order = {name: index for index, name in enumerate(places)}
            self._index()

    def seat(self, name: str) -> ServerSeat:
        return ServerSeat(self, name)

    def _index(self) -> None:
        """Rebuild the indexes of the places (the lock held)."""
        self._by_address, self._by_system = {}, {}
        for place in self._places.values():
            self._by_address.setdefault(place.address, set()).add(place.name)
            self._by_system.setdefault(_system(place), set()).add(place.name)
        self._generation += 1

    def _update(self, name: str, identity: ServerIdentity | None, failed: bool) -> None:
        with self._lock:
            place = self._places.get(name)
            if place is None:
                return
            changed = replace(place, identity=identity or place.identity, failed=failed)
            if changed == place:
                return
            # One place moves in the index: a fleet connecting at start costs
            # each connection a step, not a rebuild.
            self._by_system.get(_system(place), set()).discard(name)
            self._by_system.setdefault(_system(changed), set()).add(name)
            self._places[name] = changed
            self._generation += 1

    def _renew(self, name: str, seen: datetime) -> None:
        with self._lock:
            place = self._places.get(name)
            if place is None or place.identity is None or seen - place.identity.seen < SEEN_REFRESH:
                return
            self._places[name] = replace(place, identity=replace(place.identity, seen=seen))
            self._generation += 1

    def scope(self, name: str, known: tuple[int, LockScope] | None) -> tuple[int, LockScope]:
        """``name``'s scope and the generation it holds for; ``known`` (the
        last answer) is given back while nothing changed."""
        with self._lock:
            if known is not None and known[0] == self._generation:
                return known
            me = self._places.get(name)
            if me is None or me.identity is None:
                return (self._generation, WHOLE_SERVER)
            near = set(self._by_address.get(me.address, ()))
            if me.identity.system_identifier is not None:
                near |= self._by_system.get(me.identity.system_identifier, set())
            near.add(name)
            places = [self._places[other] for other in sorted(near, key=self._order.__getitem__)]
            return (self._generation, lock_scope(places, me))

    def scopes(self) -> dict[str, LockScope]:
        """Every connected target's scope, for people (the status page, tests)."""
        with self._lock:
            names = list(self._places)
        return {name: self.scope(name, None)[1] for name in names}


@lru_cache(maxsize=65536)
def _where(dsn: str) -> tuple[str, str | None]:
    """The server and database a DSN names: parsed once, for a fleet's
    reloads and discoveries apply the same DSNs again and again."""
    return server_and_database(dsn)


def _system(place: ServerPlace) -> int | None:
    return None if place.identity is None else place.identity.system_identifier


class ServerSeat:
    """One target's place, as its session reports to it and asks of it."""

    def __init__(self, servers: ServerMap, name: str) -> None:
        self.servers = servers
        self.name = name
        self._known: tuple[int, LockScope] | None = None
        self._database = ""

    def connected(self, identity: ServerIdentity) -> None:
        self._database = identity.database
        self.servers._update(self.name, identity, failed=False)

    def failed(self) -> None:
        # A target that connected once stays where it was: its server is down
        # or unreachable for a while, and it takes its databases back when it
        # reconnects; only one never connected counts for nothing.
        self.servers._update(self.name, None, failed=True)

    def scope(self, seen: datetime | None) -> LockScope:
        if seen is not None:
            self.servers._renew(self.name, seen)
        last = None if self._known is None else self._known[1]
        self._known = self.servers.scope(self.name, self._known)
        scope = self._known[1]
        if scope != (last or WHOLE_SERVER):
            log.info(
                "%s: judges the advisory locks of %s", self.name, scope.describe(self._database)
            )
        return scope

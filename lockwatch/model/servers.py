"""Which target judges which database's advisory locks, when several targets
read one PostgreSQL server.

``pg_locks`` shows every database of the server, so two targets of one server
would each judge (and page about) every lock. Instead a server's locks are
judged once: each target judges the locks of its own database, and the first
target of the server (in the config's order) also those of every database no
other target of that server names. A target alone on its server therefore
sees the whole server, as it always has; queues and jobs stay each target's.
Two targets of one database each judge it, as configured (a second role,
other budgets): check-config says they will tell each of its locks twice.

Targets are recognised as one server when they connect: the same
``system_identifier`` (pg_control_system()) and the same postmaster start
(a physical replica shares its primary's identifier, not its start). Before a
target has connected, a target with the same address (host:port, the loopback
names as one) counts as possibly the same server, so that nothing is judged
twice while the targets first connect; one whose connection failed counts as
nothing until it connects. Everything here is pure: ``state/servers.py`` keeps
the places and answers each target's reader.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ServerIdentity:
    """Which server a target's session reached, read when it connects."""

    # pg_control_system()'s; None when the role may not read it (then the
    # address stands for the server)
    system_identifier: int | None
    started: datetime  # pg_postmaster_start_time()
    seen: datetime  # the server's time when lockwatch last saw it up
    database: str  # current_database()


class ScopeKind(enum.Enum):
    WHOLE = "whole"  # every database of the server
    OWN = "own"  # the session's own database only
    EXCEPT = "except"  # every database but ``LockScope.skip``


@dataclass(frozen=True, slots=True)
class LockScope:
    """The databases whose advisory locks a target reads and judges."""

    kind: ScopeKind = ScopeKind.WHOLE
    # EXCEPT: the databases left out, each with the target that judges it, sorted
    skip: tuple[tuple[str, str], ...] = ()
    # OWN: the target judging the server's other databases
    judge: str | None = None

    @property
    def skipped(self) -> tuple[str, ...]:
        return tuple(database for database, _ in self.skip)

    def describe(self, database: str) -> str:
        """The scope in words.

        >>> LockScope().describe("app")
        'every database of its server'
        >>> LockScope(ScopeKind.EXCEPT, (("app2", "b"),)).describe("app")
        'database app and every database no other target of its server names (target b judges app2)'
        >>> LockScope(ScopeKind.OWN, judge="a").describe("app2")
        'database app2 only (target a judges the other databases of its server)'
        """
        if self.kind is ScopeKind.WHOLE:
            return "every database of its server"
        if self.kind is ScopeKind.EXCEPT:
            told = ", ".join(f"target {name} judges {db}" for db, name in self.skip)
            return (
                f"database {database} and every database no other target of its server "
                f"names ({told})"
            )
        return f"database {database} only (target {self.judge} judges the other databases of its server)"


WHOLE_SERVER = LockScope()


class ServerSeat(Protocol):
    """A target's place among the targets of its server, as its session tells
    it (``state/servers.py`` keeps them)."""

    def connected(self, identity: ServerIdentity) -> None:
        """The session connected and reached this server and database."""

    def failed(self) -> None:
        """The session could not connect."""

    def scope(self, seen: datetime | None) -> LockScope:
        """What the target judges now; ``seen``: the server's time at its last read."""


@dataclass(frozen=True, slots=True)
class ServerPlace:
    """A target as the server map knows it."""

    name: str
    address: str  # host:port as configured, the loopback names as one
    database: str | None  # the DSN's dbname; None: not given (the server's default)
    identity: ServerIdentity | None = None  # as of its last connection; None: none yet
    failed: bool = False  # its first connection failed (and none succeeded since)


class Relation(enum.Enum):
    SAME = "same"
    MAYBE = "maybe"  # cannot tell yet: counted as the same, so nothing is judged twice
    OTHER = "other"


def identities_relation(a: ServerIdentity, b: ServerIdentity) -> Relation | None:
    """Whether two connections reached one server; None when the identifiers
    are unknown (the role may not read them).

    A server restarted between the two connections has a new start time: the
    older identity is then out of date rather than another server's, unless
    its server was seen up after the newer one started (two servers at once).
    """
    if a.system_identifier is None or b.system_identifier is None:
        return None
    if a.system_identifier != b.system_identifier:
        return Relation.OTHER
    if a.started == b.started:
        return Relation.SAME
    older, newer = sorted((a, b), key=lambda identity: identity.started)
    return Relation.OTHER if older.seen >= newer.started else Relation.MAYBE


def places_relation(me: ServerPlace, other: ServerPlace) -> Relation:
    """How ``other`` stands to ``me`` (connected)."""
    if other.identity is None:
        if other.failed:
            return Relation.OTHER  # nothing known: it judges nothing either
        return Relation.MAYBE if other.address == me.address else Relation.OTHER
    assert me.identity is not None
    relation = identities_relation(me.identity, other.identity)
    if relation is not None:
        return relation
    return Relation.SAME if other.address == me.address else Relation.OTHER


def _database(place: ServerPlace) -> str | None:
    return place.identity.database if place.identity is not None else place.database


def lock_scope(places: Sequence[ServerPlace], me: ServerPlace) -> LockScope:
    """What ``me`` (connected) judges among ``places`` (every target, in the
    config's order, ``me`` among them). A target always judges its own
    database: two targets of one database (a second role, other budgets)
    each judge it, as configured, and check-config says so."""
    assert me.identity is not None
    mine = me.identity.database
    owner: str | None = None  # the first target of the server, when not ``me``
    judges: dict[str, str] = {}  # database: the first target of the server naming it
    for place in places:
        if place.name != me.name and places_relation(me, place) is Relation.OTHER:
            continue
        database = _database(place) if place.name != me.name else mine
        owner = owner or place.name
        if database is not None:
            judges.setdefault(database, place.name)
    if owner != me.name:
        return LockScope(ScopeKind.OWN, judge=owner)
    skip = tuple(sorted((db, name) for db, name in judges.items() if db != mine))
    return LockScope(ScopeKind.EXCEPT, skip) if skip else WHOLE_SERVER

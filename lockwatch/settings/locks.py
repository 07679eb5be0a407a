"""What lockwatch expects of advisory locks: budgets, names, roles and allowed holders."""

from __future__ import annotations

import enum
import fnmatch
import ipaddress
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated

from pydantic import Field, PlainValidator

from lockwatch.model.catalogue import HeldLocks, KnownLock
from lockwatch.model.catalogue.registry import LIBRARIES, catalogue_keys, identify
from lockwatch.model.hold_history import KeyHistory
from lockwatch.model.locks import LockKey
from lockwatch.settings.fields import (
    UNIQUE,
    Budget,
    Flag,
    Name,
    Number,
    PositiveSeconds,
    Seconds,
    Section,
    Text,
    Whole,
    at_least,
    at_most,
    check,
    fixed,
    one_of,
    to_text,
    unique_items,
)

MAX_TOP_N = 1000
# The holder changes remembered per leader lock: the most leader_churn may count.
MAX_HOLDER_CHANGES = 64
# A learned budget goes no higher than this many times the static max_hold,
# unless learning.ceiling says otherwise: holds lengthened step by step taught
# a budget of 9.5 s to become 315 s in 15 holds, and would have gone on.
CEILING_FACTOR = 10.0
DEFAULT_MAX_HOLD = 300.0
DEFAULT_EPISODE_GAP = 30.0  # seconds with no waiter on a root that end its episode
DEFAULT_ORPHAN_AFTER = 600.0


class LockRole(enum.StrEnum):
    MUTEX = "mutex"  # expected to be held briefly, by anyone allowed
    LEADER = "leader"  # expected to be held continuously by one allowed holder


def _check_library(name: str) -> str | None:
    """
    >>> _check_library("prisma") is None
    True
    >>> _check_library("prizma")[:60]
    "not a catalogued library: 'prizma' (known: flyway, golang-mi"
    """
    if name in LIBRARIES:
        return None
    return f"not a catalogued library: {name!r} (known: {', '.join(sorted(LIBRARIES))})"


IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def to_lock_key(value: object) -> LockKey:
    if isinstance(value, LockKey):
        return value
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f'not an advisory lock key: {value!r} (use 42 or "7,13")')
    return LockKey.parse(str(value))


def to_network(value: object) -> IpNetwork:
    """
    >>> to_network("10.1.2.3/8")
    Traceback (most recent call last):
    ...
    ValueError: host bits set in '10.1.2.3/8' (did you mean 10.0.0.0/8?)
    """
    if isinstance(value, ipaddress.IPv4Network | ipaddress.IPv6Network):
        return value
    text = to_text(value)
    try:
        return ipaddress.ip_network(text)
    except ValueError as exc:
        if "host bits set" in str(exc):
            loose = ipaddress.ip_network(text, strict=False)
            raise ValueError(f"host bits set in {text!r} (did you mean {loose}?)") from None
        raise ValueError(f"not an address, a CIDR or 'local': {text!r}") from None


Key = Annotated[LockKey, PlainValidator(to_lock_key)]

Network = Annotated[IpNetwork, PlainValidator(to_network)]


@dataclass(frozen=True, slots=True)
class AllowedHolders(Section):
    """Who may hold a named lock. An empty list of either kind allows any.

    ``local`` among the addresses allows Unix-socket clients, which have no
    client address.
    """

    applications: tuple[Text, ...] = ()  # fnmatch patterns of application_name
    networks: tuple[Network, ...] = ()
    local: Flag = False

    @property
    def restricted(self) -> bool:
        return bool(self.applications or self.networks or self.local)

    def allows_application(self, application_name: str) -> bool:
        return not self.applications or any(
            fnmatch.fnmatchcase(application_name, pattern) for pattern in self.applications
        )

    def allows(self, application_name: str, client_addr: str | None) -> bool:
        """
        >>> h = AllowedHolders(("billing-*",), (ipaddress.ip_network("10.0.0.0/8"),))
        >>> h.allows("billing-cron", "10.1.2.3"), h.allows("dev-laptop", "10.1.2.3")
        (True, False)
        >>> h.allows("billing-cron", "192.168.1.4")
        False
        """
        if not self.allows_application(application_name):
            return False
        if not (self.networks or self.local):
            return True
        if client_addr is None:
            return self.local
        try:
            address = ipaddress.ip_address(client_addr.split("/", 1)[0])
        except ValueError:
            return False
        return any(address in network for network in self.networks)


@dataclass(frozen=True, slots=True)
class NamedLock(Section):
    name: Annotated[Name, UNIQUE]
    key: Key
    role: Annotated[LockRole, one_of(LockRole, "role")] = LockRole.MUTEX
    database: Text | None = None  # None: the key is meant in every database of the target
    # seconds or auto; None: the target's default (mutex) or unlimited (leader)
    max_hold: Budget | None = None
    orphan_after: Budget | None = (
        None  # seconds or auto; None: the target's default (mutex) or off (leader)
    )
    allowed: Annotated[AllowedHolders, Field(alias="allowed_holders")] = field(
        default_factory=AllowedHolders
    )
    ignore: Flag = False

    def matches(self, database: str, key: LockKey) -> bool:
        return self.key == key and (self.database is None or self.database == database)


@dataclass(frozen=True, slots=True)
class Learning(Section):
    """How ``auto`` budgets are learned: after ``period`` and ``min_holds``
    completed holds of a key, its budget is max(factor x its p99 as of the
    start of the period in force, floor), at most ``ceiling``; until then the
    static default applies."""

    period: PositiveSeconds = 86400.0  # seconds since the key's first recorded hold
    min_holds: Annotated[Whole, at_least(1)] = 50
    factor: Annotated[Number, at_least(1)] = 10.0
    floor: PositiveSeconds = 30.0  # seconds no learned budget goes below
    # seconds no learned budget goes above; None: CEILING_FACTOR x the static max_hold
    ceiling: PositiveSeconds | None = None

    def budget(self, history: KeyHistory | None, now: datetime) -> float | None:
        """max(factor x p99, floor) of the key's holds as of the start of the
        learning period in force (``baseline``), once it has enough of them
        over a long enough time; None while it is still learning.

        >>> from datetime import timedelta
        >>> from lockwatch.model.hold_history import DurationStats
        >>> holds = DurationStats(60, 0.04, 0.3, 0.8, 2.0, 0.05, 3.0, ())
        >>> start = datetime(2026, 1, 1)
        >>> history = KeyHistory("app", LockKey.bigint(42), holds, None, start, baseline=0.8)
        >>> Learning().budget(history, start + timedelta(days=2))
        30.0
        >>> Learning(floor=1.0).budget(history, start + timedelta(days=2))
        8.0
        >>> Learning().budget(history, start + timedelta(hours=2)) is None
        True
        """
        if history is None or history.holds is None or history.holds.count < self.min_holds:
            return None
        if history.baseline is None or (now - history.since).total_seconds() < self.period:
            return None
        return max(self.factor * history.baseline, self.floor)


@dataclass(frozen=True, slots=True)
class LockSettings(Section):
    # seconds a lock may be held before lock_held_too_long, or auto (learned per key)
    max_hold: Budget = DEFAULT_MAX_HOLD
    # seconds a holder may sit idle before lock_orphaned, or auto (learned per key)
    orphan_after: Budget = DEFAULT_ORPHAN_AFTER
    convoy_waiters: Annotated[Whole, at_least(1)] = (
        2  # waiting sessions on one key that make a convoy
    )
    # ... once the longest of them has waited this long behind the holder of now
    convoy_wait: Seconds = 5.0
    # lock_queue: sessions queued behind a strong lock's wait (DDL, LOCK TABLE, ...)
    queue_waiters: Annotated[Whole, at_least(1)] = 2
    queue_wait: Seconds = 5.0  # ... once that many have queued this long
    # row_lock_convoy: a session waiting this long on a row (or transaction id) held by one session
    row_lock_wait: Seconds = 30.0
    # idle_in_transaction_blocker: a session idle in transaction that one waited on this long
    idle_blocker_wait: Seconds = 10.0
    # a blocking episode ends once no session has waited on its root this long
    episode_gap: PositiveSeconds = DEFAULT_EPISODE_GAP
    # unnamed locks exported individually, longest-held first
    top_n: Annotated[Whole, at_least(0), at_most(MAX_TOP_N)] = 20
    # keys libraries hold on purpose
    ignore: Annotated[tuple[Key, ...], unique_items(lambda key: f"key {key}")] = ()
    named: tuple[NamedLock, ...] = ()
    # name the keys well-known libraries take (model/catalogue); a named lock wins
    catalogue: Flag = True
    catalogue_skip: tuple[Annotated[Text, check(_check_library)], ...] = ()
    learning: Learning = field(default_factory=Learning)
    # A leader lock whose holder changed this many times within the window churns.
    leader_churn_changes: Annotated[Whole, at_least(2), at_most(MAX_HOLDER_CHANGES)] = 3
    leader_churn_window: PositiveSeconds = 6 * 3600.0
    # Clients may reach the server through a pooler whose console lockwatch does
    # not read: a backend holding a session lock may be a pooler's, its
    # application_name and address its last client's, so its holder is
    # "backend N, client unknown" unless it is found pooled.
    clients_through_pooler: Flag = False

    @property
    def static_max_hold(self) -> float:
        return fixed(self.max_hold, DEFAULT_MAX_HOLD)

    @property
    def learned_ceiling(self) -> float:
        """Seconds no learned budget goes above: ``learning.ceiling``, else
        CEILING_FACTOR x the static max_hold (300 s: 50 minutes)."""
        if self.learning.ceiling is not None:
            return self.learning.ceiling
        return CEILING_FACTOR * self.static_max_hold

    def learned_budget(self, history: KeyHistory | None, now: datetime) -> float | None:
        """The key's learned budget (``learning``), under ``learned_ceiling``."""
        learned = self.learning.budget(history, now)
        return None if learned is None else min(learned, self.learned_ceiling)

    @property
    def static_orphan_after(self) -> float:
        return fixed(self.orphan_after, DEFAULT_ORPHAN_AFTER)

    def catalogue_entry(self, database: str, key: LockKey) -> KnownLock | None:
        """The catalogue's word on the key (when on), unless a named lock in
        the config covers it."""
        if not self.catalogue or self._configured(database, key) is not None:
            return None
        return identify(database, key, self.catalogue_skip)

    def catalogued(self, database: str, key: LockKey) -> bool:
        """The catalogue (when on) names the key: a library's own lock."""
        return self.catalogue and identify(database, key, self.catalogue_skip) is not None

    def catalogued_keys(self, database: str) -> frozenset[LockKey]:
        """Every key the catalogue (when on) names in ``database``: ``catalogued``
        for many keys of one database at once."""
        if not self.catalogue:
            return frozenset()
        return frozenset(key for key in catalogue_keys(database) if self.catalogued(database, key))

    def named_lock(
        self, database: str, key: LockKey, held: HeldLocks | None = None
    ) -> NamedLock | None:
        """The configured named lock of the key, else the name its queue
        library gives it while holding it on purpose (``held``), else its
        catalogue entry as a mutex with the target's budgets."""
        named = self._configured(database, key)
        if named is not None:
            return named
        known = None if held is None else held.get((database, key))
        if known is not None:
            return NamedLock(known.name, key, database=database)
        if not self.catalogue:
            return None
        known = identify(database, key, self.catalogue_skip)
        if known is None:
            return None
        return NamedLock(known.name, key, database=database)

    def held_on_purpose(
        self, database: str, key: LockKey, held: HeldLocks | None
    ) -> KnownLock | None:
        """What its library holds the key for now, unless a named lock in the
        config says otherwise."""
        known = None if held is None else held.get((database, key))
        return None if known is None or self._configured(database, key) else known

    def _configured(self, database: str, key: LockKey) -> NamedLock | None:
        for lock in self.named:
            if lock.matches(database, key):
                return lock
        return None

    def ignored(self, database: str, key: LockKey) -> bool:
        named = self._configured(database, key)
        if named is not None:
            return named.ignore
        return key in self.ignore

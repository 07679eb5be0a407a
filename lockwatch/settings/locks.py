"""What lockwatch expects of advisory locks: budgets, names, roles and allowed holders."""

from __future__ import annotations

import enum
import fnmatch
import ipaddress
from dataclasses import dataclass, field

from lockwatch.model.locks import LockKey


class LockRole(enum.StrEnum):
    MUTEX = "mutex"  # expected to be held briefly, by anyone allowed
    LEADER = "leader"  # expected to be held continuously by one allowed holder


IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class AllowedHolders:
    """Who may hold a named lock. An empty list of either kind allows any.

    ``local`` among the addresses allows Unix-socket clients, which have no
    client address.
    """

    applications: tuple[str, ...] = ()  # fnmatch patterns of application_name
    networks: tuple[IpNetwork, ...] = ()
    local: bool = False

    @property
    def restricted(self) -> bool:
        return bool(self.applications or self.networks or self.local)

    def allows(self, application_name: str, client_addr: str | None) -> bool:
        """
        >>> h = AllowedHolders(("billing-*",), (ipaddress.ip_network("10.0.0.0/8"),))
        >>> h.allows("billing-cron", "10.1.2.3"), h.allows("dev-laptop", "10.1.2.3")
        (True, False)
        >>> h.allows("billing-cron", "192.168.1.4")
        False
        """
        if self.applications and not any(
            fnmatch.fnmatchcase(application_name, pattern) for pattern in self.applications
        ):
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
class NamedLock:
    name: str
    key: LockKey
    role: LockRole = LockRole.MUTEX
    database: str | None = None  # None: the key is meant in every database of the target
    max_hold: float | None = (
        None  # seconds; None: the target's default (mutex) or unlimited (leader)
    )
    orphan_after: float | None = None  # seconds; None: the target's default (mutex) or off (leader)
    allowed: AllowedHolders = field(default_factory=AllowedHolders)
    ignore: bool = False

    def matches(self, database: str, key: LockKey) -> bool:
        return self.key == key and (self.database is None or self.database == database)


@dataclass(frozen=True, slots=True)
class LockSettings:
    max_hold: float = 300.0  # seconds a lock may be held before lock_held_too_long
    orphan_after: float = 600.0  # seconds a holder may sit idle before lock_orphaned
    convoy_waiters: int = 2  # waiting sessions on one key that make a convoy
    convoy_wait: float = 5.0  # ... once the longest of them has waited this long
    top_n: int = 20  # unnamed locks exported individually, longest-held first
    ignore: tuple[LockKey, ...] = ()  # keys libraries hold on purpose
    named: tuple[NamedLock, ...] = ()

    def named_lock(self, database: str, key: LockKey) -> NamedLock | None:
        for lock in self.named:
            if lock.matches(database, key):
                return lock
        return None

    def ignored(self, database: str, key: LockKey) -> bool:
        named = self.named_lock(database, key)
        if named is not None:
            return named.ignore
        return key in self.ignore

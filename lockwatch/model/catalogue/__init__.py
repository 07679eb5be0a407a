"""Lock keys that well-known software takes, named with no config.

Each library is one module beside this one, listed once in ``registry.py``.
An entry knows the keys its library takes in a database (a constant, or a
formula of the database's name) and what they are for (``Purpose``). Naming a key is pure: the database name and the key in, a
``KnownLock`` (or None) out.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from lockwatch.model.locks import LockKey


class Purpose(enum.StrEnum):
    """What a library holds a key for. Every catalogue entry so far is a
    migration lock or a maintenance mutex. Per-job locks and liveness locks are keyed
    on row ids the database name cannot tell: a queue preset that knows the
    rows names them (``sample/held_locks.py``), and they are never paged as
    held too long or orphaned while their row says so."""

    MUTEX = "mutex"  # held for a short critical section; a queue behind it is a stuck deploy
    # Held by a migration tool around its migrations, which run on the same
    # session: statements under it are the lock's own work, not other work.
    MIGRATION = "migration"
    JOB = "job"  # held by a worker's session while it runs one job (good_job, Que)
    LIVENESS = "liveness"  # held by a process for its whole life (good_job's processes)


@dataclass(frozen=True, slots=True)
class KnownLock:
    """One key a library takes, in one database."""

    library: str  # the catalogue entry's id, e.g. "prisma"
    name: str  # as people see it: "Prisma Migrate", "Rails migrations on db app"
    purpose: Purpose


# The locks a target's queue libraries hold now on purpose, by (database, key):
# read from their rows by the presets, as the catalogue cannot from the key.
HeldLocks = Mapping[tuple[str, LockKey], KnownLock]


@dataclass(frozen=True, slots=True)
class CatalogueEntry:
    library: str
    purpose: Purpose
    key_of: Callable[[str], LockKey]  # the key it takes in the database of that name
    label: str  # its name; {database} stands for the database's
    source: str  # where the key or formula was read: version and file

    def keys(self, database: str) -> Mapping[LockKey, str]:
        """
        >>> entry = CatalogueEntry("x", Purpose.MUTEX, lambda db: LockKey.bigint(len(db)), "X on {database}", "")
        >>> entry.keys("app")
        {LockKey(pair=False, first=3, second=0): 'X on app'}
        """
        return {self.key_of(database): self.label.format(database=database)}


def name_bytes(name: str) -> bytes:
    r"""A database name as the server hashes it: its bytes, which a name read
    with surrogateescape gets back; any other lone surrogate cannot be in a
    name the server holds, so it only needs to hash without failing.

    >>> name_bytes("app"), name_bytes("a\udcff"), name_bytes("a\ud800")
    (b'app', b'a\xff', b'a?')
    """
    try:
        return name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return name.encode("utf-8", "replace")


def signed64(value: int) -> int:
    """The low 64 bits of ``value`` as PostgreSQL's signed bigint.

    >>> signed64(0xFFFFFFFFFFFFFFFF), signed64(1 << 64 | 7)
    (-1, 7)
    """
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def signed32(value: int) -> int:
    """The low 32 bits of ``value`` as a signed int (Java's int arithmetic).

    >>> signed32(0xFFFFFFFF), signed32(1 << 32 | 5)
    (-1, 5)
    """
    value &= (1 << 32) - 1
    return value - (1 << 32) if value >= 1 << 31 else value

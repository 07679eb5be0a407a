"""Every library the catalogue knows, one line each.

Read and found to take no advisory lock (so nothing to name): graphile-worker
0.16.6 (its migrations and job locks are rows: ``locked_by``/``locked_at``),
procrastinate 3.10 (row locks and a ``lock`` column), Liquibase (its
DATABASECHANGELOGLOCK table). Ecto's optional ``migration_lock:
:pg_advisory_lock`` keys on ``:erlang.phash2({:ecto, prefix, Repo})``
(ecto_sql lib/ecto/adapters/postgres.ex), a hash of the repo's module name
that the database cannot tell: name it under ``locks.named``.
"""

from __future__ import annotations

from collections.abc import Collection
from functools import lru_cache

from lockwatch.model.catalogue import (
    CatalogueEntry,
    KnownLock,
    flyway,
    golang_migrate,
    pg_boss,
    prisma,
    rails,
)
from lockwatch.model.locks import LockKey

ENTRIES: tuple[CatalogueEntry, ...] = (
    prisma.ENTRY,
    rails.ENTRY,
    golang_migrate.ENTRY,
    flyway.ENTRY,
    pg_boss.ENTRY,
)
LIBRARIES = frozenset(entry.library for entry in ENTRIES)


@lru_cache(maxsize=256)
def _keys_in(database: str) -> dict[LockKey, KnownLock]:
    """Every catalogued key of ``database``: hashed once per database name."""
    known: dict[LockKey, KnownLock] = {}
    for entry in ENTRIES:
        for key, name in entry.keys(database).items():
            known.setdefault(key, KnownLock(entry.library, name, entry.purpose))
    return known


def identify(database: str, key: LockKey, skip: Collection[str] = ()) -> KnownLock | None:
    """The library that takes ``key`` in ``database``, unless it is skipped."""
    known = _keys_in(database).get(key)
    if known is None or known.library in skip:
        return None
    return known

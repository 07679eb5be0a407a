"""Every library the catalogue knows, one line each.

Read and found to take no advisory lock (so nothing to name): graphile-worker
0.16.6 (its migrations and job locks are rows: ``locked_by``/``locked_at``),
procrastinate 3.10 (row locks and a ``lock`` column), Solid Queue (row locks
and process heartbeats), Liquibase (its DATABASECHANGELOGLOCK table).
Keyed on what the database cannot tell, so left to ``locks.named``: Ecto's
optional ``migration_lock: :pg_advisory_lock`` (``:erlang.phash2({:ecto,
prefix, Repo})``, ecto_sql lib/ecto/adapters/postgres.ex) and Oban's unique
jobs (``acquire_lock``: ``phash2(prefix) + key``), hashes of Erlang
terms; good_job's job and process locks (md5 of the table name and a row's
uuid, app/models/concerns/good_job/advisory_lockable.rb) and Que's (the job
id), one per row, which the good_job and que presets name from their rows
instead (``sample/held_locks.py``: per-job and liveness locks).
Liveness kept in rows, not in advisory locks (nothing to catalogue): pg-boss
10.4.2 (transaction locks only), Oban (``oban_peers``), River
(``river_leader``), Solid Queue (process heartbeats) and Que (``que_lockers``).
"""

from __future__ import annotations

from collections.abc import Collection
from functools import lru_cache

from lockwatch.model.catalogue import (
    CatalogueEntry,
    KnownLock,
    flyway,
    golang_migrate,
    goose,
    node_pg_migrate,
    pg_boss,
    prisma,
    rails,
    sqlx,
)
from lockwatch.model.locks import LockKey

ENTRIES: tuple[CatalogueEntry, ...] = (
    prisma.ENTRY,
    rails.ENTRY,
    golang_migrate.ENTRY,
    flyway.ENTRY,
    goose.ENTRY,
    sqlx.ENTRY,
    node_pg_migrate.ENTRY,
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


def catalogue_keys(database: str) -> Collection[LockKey]:
    """Every key the catalogue knows of in ``database``, skipped libraries' too."""
    return _keys_in(database).keys()


def identify(database: str, key: LockKey, skip: Collection[str] = ()) -> KnownLock | None:
    """The library that takes ``key`` in ``database``, unless it is skipped."""
    known = _keys_in(database).get(key)
    if known is None or known.library in skip:
        return None
    return known

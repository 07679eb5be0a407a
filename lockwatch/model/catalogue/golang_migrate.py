"""golang-migrate's PostgreSQL driver: a session ``pg_advisory_lock`` around
``migrate up``, its key derived from the database, schema and table names.

Source: golang-migrate/migrate v4, database/util.go (``GenerateAdvisoryLockId``:
the IEEE CRC-32 of the names joined by NUL bytes, times the salt 1486364155,
as a uint32) and database/postgres/postgres.go (``Lock``: the database name,
the migrations schema and the migrations table). lockwatch knows the defaults:
schema ``public``, table ``schema_migrations``.
"""

from __future__ import annotations

import zlib

from lockwatch.model.catalogue import CatalogueEntry, Purpose, name_bytes
from lockwatch.model.locks import LockKey

SALT = 1486364155
DEFAULT_SCHEMA = "public"
DEFAULT_TABLE = "schema_migrations"


def migrate_key(database: str, schema: str = DEFAULT_SCHEMA, table: str = DEFAULT_TABLE) -> LockKey:
    names = b"\x00".join(name_bytes(name) for name in (database, schema, table))
    return LockKey.bigint((zlib.crc32(names) * SALT) & 0xFFFFFFFF)


ENTRY = CatalogueEntry(
    library="golang-migrate",
    purpose=Purpose.MIGRATION,
    key_of=migrate_key,
    label="golang-migrate on db {database}",
    source="golang-migrate/migrate v4 database/util.go, database/postgres/postgres.go",
)

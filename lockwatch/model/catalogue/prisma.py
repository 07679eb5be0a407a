"""Prisma Migrate: one constant key in every database, taken with a session
``pg_advisory_lock`` for the length of ``migrate deploy`` / ``migrate dev``.

Source: prisma/prisma-engines,
schema-engine/connectors/sql-schema-connector/src/flavour/postgres.rs
(``acquire_lock``, the engine of Prisma 6 and 7): the constant 72707369,
taken with a 10 s timeout.
"""

from __future__ import annotations

from lockwatch.model.catalogue import CatalogueEntry, Purpose
from lockwatch.model.locks import LockKey

MIGRATE_KEY = LockKey.bigint(72707369)


ENTRY = CatalogueEntry(
    library="prisma",
    purpose=Purpose.MIGRATION,
    key_of=lambda database: MIGRATE_KEY,
    label="Prisma Migrate",
    source="prisma-engines schema-engine/.../flavour/postgres.rs (Prisma 6.x/7.x)",
)

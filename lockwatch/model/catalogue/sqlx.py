"""SQLx migrations (Rust, ``sqlx migrate run`` and ``migrate!``): a session
``pg_advisory_lock`` around them, its key derived from the database's name.

Source: launchbadge/sqlx sqlx-postgres/src/migrate.rs (0.7-0.8,
``generate_lock_id``): 0x3d32ad9e times the CRC-32 (ISO-HDLC) of
``current_database()``, which fits a signed bigint.
"""

from __future__ import annotations

import zlib

from lockwatch.model.catalogue import CatalogueEntry, Purpose, name_bytes
from lockwatch.model.locks import LockKey

FACTOR = 0x3D32AD9E


def migrate_key(database: str) -> LockKey:
    return LockKey.bigint(FACTOR * zlib.crc32(name_bytes(database)))


ENTRY = CatalogueEntry(
    library="sqlx",
    purpose=Purpose.MIGRATION,
    key_of=migrate_key,
    label="SQLx migrations on db {database}",
    source="launchbadge/sqlx sqlx-postgres/src/migrate.rs (generate_lock_id)",
)

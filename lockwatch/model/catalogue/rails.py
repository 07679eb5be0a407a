"""Rails (ActiveRecord) migrations: a session ``pg_try_advisory_lock`` around
``db:migrate``, its key derived from the database's name.

Source: rails/rails, activerecord/lib/active_record/migration.rb (7.x),
``Migrator#generate_migrator_advisory_lock_id``: MIGRATOR_SALT (2053462845)
times the CRC-32 of ``current_database``. The product of a 31-bit salt and a
32-bit checksum always fits a signed bigint.
"""

from __future__ import annotations

import zlib

from lockwatch.model.catalogue import CatalogueEntry, Purpose, name_bytes
from lockwatch.model.locks import LockKey

MIGRATOR_SALT = 2053462845


def migrator_key(database: str) -> LockKey:
    """
    >>> migrator_key("app").first == MIGRATOR_SALT * zlib.crc32(b"app")
    True
    """
    return LockKey.bigint(MIGRATOR_SALT * zlib.crc32(name_bytes(database)))


ENTRY = CatalogueEntry(
    library="rails",
    purpose=Purpose.MIGRATION,
    key_of=migrator_key,
    label="Rails migrations on db {database}",
    source="rails activerecord/lib/active_record/migration.rb (7.x)",
)

"""Flyway on PostgreSQL: ``pg_try_advisory_lock`` (or its transaction form)
around a migration, its key the magic number of "Flyway" plus the Java hash
of the quoted history table's name.

Source: flyway/flyway, flyway-database-postgresql
.../database/postgresql/PostgreSQLAdvisoryLockTemplate.java (LOCK_MAGIC_NUM,
the bytes of "Flyway") and PostgreSQLConnection.java (``lock``: discriminator
``table.toString().hashCode()``). lockwatch knows the default table,
``"public"."flyway_schema_history"``.
"""

from __future__ import annotations

from lockwatch.model.catalogue import CatalogueEntry, Purpose, signed32, signed64
from lockwatch.model.locks import LockKey

LOCK_MAGIC_NUM = int.from_bytes(b"Flyway", "big")
DEFAULT_TABLE = '"public"."flyway_schema_history"'


def java_hash(text: str) -> int:
    """``String.hashCode()`` over UTF-16 code units, in Java's int arithmetic.

    >>> java_hash("a"), java_hash("ab"), java_hash("polygenelubricants")
    (97, 3105, -2147483648)
    """
    data = text.encode("utf-16-be")
    value = 0
    for high, low in zip(data[::2], data[1::2], strict=True):
        value = (31 * value + (high << 8 | low)) & 0xFFFFFFFF
    return signed32(value)


def history_key(table: str = DEFAULT_TABLE) -> LockKey:
    return LockKey.bigint(signed64(LOCK_MAGIC_NUM + java_hash(table)))


KEY = history_key()


ENTRY = CatalogueEntry(
    library="flyway",
    purpose=Purpose.MIGRATION,
    key_of=lambda database: KEY,
    label="Flyway migrations",
    source="flyway PostgreSQLAdvisoryLockTemplate.java, PostgreSQLConnection.java (9.x-11.x)",
)

"""goose (pressly/goose v3): a session ``pg_try_advisory_lock`` around its
migrations when a session locker is configured, one constant key.

Source: pressly/goose v3 lock/postgres.go (``DefaultLockID``: the CRC-64/ECMA
checksum of "goose", 5887940537704921958).
"""

from __future__ import annotations

from lockwatch.model.catalogue import CatalogueEntry, Purpose
from lockwatch.model.locks import LockKey

KEY = LockKey.bigint(5887940537704921958)

ENTRY = CatalogueEntry(
    library="goose",
    purpose=Purpose.MIGRATION,
    key_of=lambda database: KEY,
    label="goose migrations",
    source="pressly/goose v3 lock/postgres.go (DefaultLockID)",
)

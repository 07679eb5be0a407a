"""pg-boss: a transaction ``pg_advisory_xact_lock`` around its maintenance,
its schema migrations and its queue changes, one key per database and schema.

Source: timgit/pg-boss 10.4.2, src/plans.js (``advisoryLock``, used by
``locked``): the first 64 bits of SHA-224 over
``current_database() || '.pgboss.' || schema``, as a signed bigint
(``('x' || encode(sha224(...), 'hex'))::bit(64)::bigint``). lockwatch knows
the default schema, ``pgboss``.
"""

from __future__ import annotations

import hashlib

from lockwatch.model.catalogue import CatalogueEntry, Purpose, name_bytes, signed64
from lockwatch.model.locks import LockKey

DEFAULT_SCHEMA = "pgboss"


def maintenance_key(database: str, schema: str = DEFAULT_SCHEMA) -> LockKey:
    digest = hashlib.sha224(name_bytes(f"{database}.pgboss.{schema}")).digest()
    return LockKey.bigint(signed64(int.from_bytes(digest[:8], "big")))


ENTRY = CatalogueEntry(
    library="pg-boss",
    purpose=Purpose.MUTEX,
    key_of=maintenance_key,
    label="pg-boss maintenance",
    source="pg-boss 10.4.2 src/plans.js (advisoryLock)",
)

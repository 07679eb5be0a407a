"""node-pg-migrate: a session advisory lock around ``migrate up``/``down``,
one constant key (``pg_try_advisory_lock``, or ``pg_advisory_lock`` with
``advisoryLockMode: "wait"``).

Source: salsita/node-pg-migrate 9.0.0 src/runner.ts (``PG_MIGRATE_LOCK_ID``,
7241865325823964; dist/bundle/index.js of the npm package).
"""

from __future__ import annotations

from lockwatch.model.catalogue import CatalogueEntry, Purpose
from lockwatch.model.locks import LockKey

KEY = LockKey.bigint(7241865325823964)

ENTRY = CatalogueEntry(
    library="node-pg-migrate",
    purpose=Purpose.MIGRATION,
    key_of=lambda database: KEY,
    label="node-pg-migrate",
    source="node-pg-migrate 9.0.0 src/runner.ts (PG_MIGRATE_LOCK_ID)",
)

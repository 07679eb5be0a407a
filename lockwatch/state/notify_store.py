"""The notifier's part of the shared PostgreSQL store (``pings.dsn``): the
sender's lease of each scope, and each channel's state, fenced by the lease.

Replicas of a shard elect their sender here (``notify/election.py``). A lease
row names its holder and a fencing token; the token grows whenever the lease
changes hands or lapses, and every write of a channel's state names the
token it was made under: a write made under an older one, or after the lease
ran out, changes nothing. Times are the database's (``now()``), never a
replica's clock, which may be wrong.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from lockwatch.state.pgstore import StoreConnection, StoreError

LEASES = "lockwatch_notify_leases"
STATES = "lockwatch_notify_state"

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS {leases} (
    scope text PRIMARY KEY,
    holder text NOT NULL,
    token bigint NOT NULL,
    expires_at timestamptz NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS {states} (
    scope text NOT NULL,
    channel text NOT NULL,
    document jsonb NOT NULL,
    token bigint NOT NULL,
    PRIMARY KEY (scope, channel)
)""",
)
# Taken when free or lapsed, renewed by its holder; the token stays while the
# holder keeps it unbroken, and grows by one at any other change.
_ACQUIRE = """INSERT INTO {leases} AS lease (scope, holder, token, expires_at)
VALUES (%(scope)s, %(holder)s, 1, now() + make_interval(secs => %(ttl)s))
ON CONFLICT (scope) DO UPDATE SET
    token = CASE WHEN lease.holder = EXCLUDED.holder AND lease.expires_at > now()
        THEN lease.token ELSE lease.token + 1 END,
    holder = EXCLUDED.holder,
    expires_at = EXCLUDED.expires_at
WHERE lease.expires_at <= now() OR lease.holder = EXCLUDED.holder
RETURNING token"""
_RELEASE = """UPDATE {leases} SET expires_at = now()
WHERE scope = %(scope)s AND holder = %(holder)s AND token = %(token)s AND expires_at > now()"""
# The lease row is read FOR SHARE: a replica taking the lease over waits for
# this write to commit (and then reads it), or this write sees the new token.
_SAVE = """INSERT INTO {states} AS state (scope, channel, document, token)
SELECT lease.scope, %(channel)s, %(document)s, lease.token FROM {leases} AS lease
WHERE lease.scope = %(scope)s AND lease.holder = %(holder)s AND lease.token = %(token)s
    AND lease.expires_at > now()
FOR SHARE
ON CONFLICT (scope, channel) DO UPDATE SET document = EXCLUDED.document, token = EXCLUDED.token
WHERE state.token <= EXCLUDED.token
RETURNING token"""
_LOAD = "SELECT document FROM {states} WHERE scope = %(scope)s AND channel = %(channel)s"
_HOLDER = "SELECT holder, token, expires_at > now() FROM {leases} WHERE scope = %(scope)s"


class NotifyStore:
    """One connection, autocommit, each statement its own short transaction
    under a statement timeout; a failure closes it and the next call
    reconnects. Thread-safe: the election and every channel share it."""

    def __init__(
        self, dsn: str, *, timeout: float = 5.0, leases: str = LEASES, states: str = STATES
    ) -> None:
        self._store = StoreConnection(
            dsn,
            "notify store",
            {"leases": leases, "states": states},
            _SCHEMA,
            connect_timeout=max(1, round(timeout)),
            options=f"-c statement_timeout={int(timeout * 1000)}",
            application_name="lockwatch-notify",
        )
        self._lock = threading.Lock()
        self._closed = False

    def _run(self, query: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        with self._lock:
            if self._closed:
                raise StoreError("notify store: closed (lockwatch is stopping)")
            return self._store.run(query, params)

    def acquire(self, scope: str, holder: str, ttl: float) -> int | None:
        """Take or renew the lease of ``scope`` for ``ttl`` seconds: its token,
        or None when another holder has it."""
        rows = self._run(_ACQUIRE, {"scope": scope, "holder": holder, "ttl": ttl})
        return int(rows[0][0]) if rows else None

    def release(self, scope: str, holder: str, token: int) -> None:
        """End the lease now, if it is still this holder's: another takes it at its next try."""
        self._run(_RELEASE, {"scope": scope, "holder": holder, "token": token})

    def holder(self, scope: str) -> tuple[str, int, bool] | None:
        """Who holds the lease of ``scope``, its token and whether it is unexpired."""
        rows = self._run(_HOLDER, {"scope": scope})
        return None if not rows else (str(rows[0][0]), int(rows[0][1]), bool(rows[0][2]))

    def save(
        self, scope: str, channel: str, document: Mapping[str, Any], holder: str, token: int
    ) -> bool:
        """Write a channel's state, only while ``holder`` holds the unexpired
        lease under ``token``; False when the write was refused."""
        params = {
            "scope": scope,
            "channel": channel,
            "document": json.dumps(document),
            "holder": holder,
            "token": token,
        }
        return bool(self._run(_SAVE, params))

    def load(self, scope: str, channel: str) -> dict[str, Any] | None:
        rows = self._run(_LOAD, {"scope": scope, "channel": channel})
        if not rows:
            return None
        stored = rows[0][0]
        document = json.loads(stored) if isinstance(stored, str) else stored
        return document if isinstance(document, dict) else None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._store.close()

"""The connection pooler in front of a target."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class PoolerSpec:
    """pgbouncer's admin console, read to join its server connections to pg_locks."""

    dsn: str = field(repr=False)  # dbname=pgbouncer, a stats_users login is enough

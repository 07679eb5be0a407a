"""The connection pooler in front of a target."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from lockwatch.settings.fields import Dsn, Secret, Section


@dataclass(frozen=True, slots=True)
class PoolerSpec(Section):
    """pgbouncer's admin console, read to join its server connections to pg_locks."""

    # dbname=pgbouncer, a stats_users login is enough
    dsn: Annotated[Dsn, Secret()] = field(repr=False)

"""Reads what ends a backend whose client vanished: the server's keepalive and
timeout settings (``sql/orphan_timeouts.sql``), and pgbouncer's limits on a
server connection from its admin console (``SHOW CONFIG``)."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from typing import Any

import psycopg
from psycopg.rows import dict_row

from lockwatch.model.keepalive import PoolerTimeouts, ServerTimeouts

QUERY = (resources.files("lockwatch.sample") / "sql" / "orphan_timeouts.sql").read_text(
    encoding="utf-8"
)


def _seconds(value: Any) -> float | None:
    """A setting in seconds; 0 (and -1, and absent) mean off."""
    if value is None:
        return None
    seconds = float(value)
    return seconds if seconds > 0 else None


def server_timeouts(conn: psycopg.Connection[Any]) -> ServerTimeouts:
    """The settings as ``conn``'s session sees them (per role and database)."""
    with conn.cursor(row_factory=dict_row) as cursor:
        row = cursor.execute(QUERY).fetchone()
    assert row is not None  # an aggregate returns one row
    count = _seconds(row["tcp_keepalives_count"])
    return ServerTimeouts(
        major=int(row["major"]),
        tcp_keepalives_idle=_seconds(row["tcp_keepalives_idle"]),
        tcp_keepalives_interval=_seconds(row["tcp_keepalives_interval"]),
        tcp_keepalives_count=None if count is None else int(count),
        idle_session_timeout=_seconds(row["idle_session_timeout"]),
        idle_in_transaction_session_timeout=_seconds(row["idle_in_transaction_session_timeout"]),
        client_connection_check_interval=_seconds(row["client_connection_check_interval"]),
        over_tcp=bool(row["over_tcp"]),
    )


def pooler_timeouts_from(config: Mapping[str, str]) -> PoolerTimeouts:
    """SHOW CONFIG's key/value rows (seconds in pgbouncer's own words)."""

    def seconds(key: str) -> float | None:
        try:
            return _seconds(float(config[key]))
        except (KeyError, ValueError):
            return None

    return PoolerTimeouts(
        server_lifetime=seconds("server_lifetime"),
        server_idle_timeout=seconds("server_idle_timeout"),
        pool_mode=config.get("pool_mode"),
    )


def pooler_timeouts(admin: psycopg.Connection[Any]) -> PoolerTimeouts:
    """pgbouncer's defaults for every pool (a pool may override pool_mode)."""
    rows = admin.execute("SHOW CONFIG").fetchall()
    return pooler_timeouts_from({str(row[0]): str(row[1]) for row in rows})

"""Reads what ends a backend whose client vanished: the server's keepalive and
timeout settings (``sql/orphan_timeouts.sql``) and those set per role and
database (``sql/role_settings.sql``), never the reading session's own, and
pgbouncer's limits on a server connection from its admin console (``SHOW
CONFIG``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import resources
from typing import Any

import psycopg
from psycopg.rows import dict_row

from lockwatch.model.keepalive import (
    TIMEOUT_SETTINGS,
    PoolerTimeouts,
    RoleSetting,
    ServerSettings,
    ServerTimeouts,
)

_SQL = resources.files("lockwatch.sample") / "sql"
QUERY = (_SQL / "orphan_timeouts.sql").read_text(encoding="utf-8")
ROLE_QUERY = (_SQL / "role_settings.sql").read_text(encoding="utf-8")
_UNITS = {"us": 1e-6, "ms": 0.001, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_VALUE = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)\s*([a-z]*)\s*$")
# Sources of a value the reading session gave itself: a SET, or its startup
# options. The value it started with is reset_val, unless its options set it.
_SESSION_SOURCES = frozenset({"session"})
_HIDING_SOURCES = frozenset({"client", "user", "database", "database user"})


def _seconds(value: Any) -> float | None:
    """A setting in seconds; 0 (and -1, and absent) mean off."""
    if value is None:
        return None
    seconds = float(value)
    return seconds if seconds > 0 else None


def setting_seconds(text: str, unit: str | None) -> float | None:
    """A setting's value as pg_db_role_setting keeps it (``5s``, ``5000``,
    ``1min``), in seconds given its base ``unit``; None: off, or not a value.

    >>> setting_seconds("5s", "ms"), setting_seconds("5000", "ms"), setting_seconds("1min", "s")
    (5.0, 5.0, 60.0)
    >>> setting_seconds("0", "ms") is None, setting_seconds("3", None)
    (True, 3.0)
    """
    match = _VALUE.match(text.strip().strip("'\"").lower())
    if match is None:
        return None
    number, written = float(match.group(1)), match.group(2)
    factor = _UNITS.get(written or (unit or ""), 1.0 if not written else None)
    if factor is None:
        return None
    return _seconds(number * factor)


def _timeouts(values: Mapping[str, float | None], major: int, over_tcp: bool) -> ServerTimeouts:
    count = values.get("tcp_keepalives_count")
    return ServerTimeouts(
        major=major,
        tcp_keepalives_idle=values.get("tcp_keepalives_idle"),
        tcp_keepalives_interval=values.get("tcp_keepalives_interval"),
        tcp_keepalives_count=None if count is None else int(count),
        idle_session_timeout=values.get("idle_session_timeout"),
        idle_in_transaction_session_timeout=values.get("idle_in_transaction_session_timeout"),
        client_connection_check_interval=values.get("client_connection_check_interval"),
        over_tcp=over_tcp,
    )


def server_settings(conn: psycopg.Connection[Any]) -> ServerSettings:
    """The server's own values and those set per role and database.

    A value the reading session set itself (lockwatch's own timeouts) is
    replaced by the one it started with; a value its role or database set
    hides the server's, which is then taken as PostgreSQL's built-in one and
    named in ``hidden``."""
    with conn.cursor(row_factory=dict_row) as cursor:
        rows = cursor.execute(QUERY).fetchall()
        role_rows = cursor.execute(ROLE_QUERY).fetchall()
    values: dict[str, float | None] = {}
    units: dict[str, str | None] = {}
    hidden = []
    major, over_tcp = 0, True
    for row in rows:
        name, unit = str(row["name"]), row["unit"]
        major, over_tcp, units[name] = int(row["major"]), bool(row["over_tcp"]), unit
        if row["own"] or row["source"] in _HIDING_SOURCES:
            hidden.append(name)
            text = row["boot_val"]
        else:
            text = row["reset_val"] if row["source"] in _SESSION_SOURCES else row["setting"]
        values[name] = setting_seconds(str(text), unit)
    role_settings = []
    for row in role_rows:
        name, _, value = str(row["setting"]).partition("=")
        if name in TIMEOUT_SETTINGS:
            role_settings.append(
                RoleSetting(
                    name, setting_seconds(value, units.get(name)), row["role"], row["database"]
                )
            )
    return ServerSettings(_timeouts(values, major, over_tcp), tuple(role_settings), tuple(hidden))


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

"""Reads pgbouncer's admin console: which server backend sits in which pool, in
which pool mode, and which client (if any) it serves right now.

A ``stats_users`` login is enough. The admin console speaks only the simple
query protocol, hence the client-side cursor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import psycopg

from lockwatch.model.pooler import PoolerConnection, PoolerSnapshot
from lockwatch.sample.base import SampleContext, SampleError
from lockwatch.util.secrets import describe_dsn, dsn_secrets, first_line, redact


def _text(row: Mapping[str, Any], column: str) -> str | None:
    value = row.get(column)
    return None if value is None or value == "" else str(value)


def _number(row: Mapping[str, Any], column: str) -> int | None:
    value = row.get(column)
    try:
        return None if value in (None, "") else int(value)
    except (TypeError, ValueError):
        return None


def connection_from_row(row: Mapping[str, Any]) -> PoolerConnection:
    """Columns are read by name: pgbouncer adds columns between releases."""
    return PoolerConnection(
        ptr=str(row.get("ptr") or ""),
        link=str(row.get("link") or ""),
        database=str(row.get("database") or ""),
        user=str(row.get("user") or ""),
        state=str(row.get("state") or ""),
        addr=_text(row, "addr"),
        port=_number(row, "port"),
        local_addr=_text(row, "local_addr"),
        local_port=_number(row, "local_port"),
        connect_time=_text(row, "connect_time"),
        request_time=_text(row, "request_time"),
        application_name=_text(row, "application_name"),
        remote_pid=_number(row, "remote_pid") or None,
    )


def _rows(conn: psycopg.Connection[Any], command: str) -> list[dict[str, Any]]:
    cursor = conn.execute(command)
    names = [column.name for column in cursor.description or ()]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def snapshot_from_rows(
    pools: Sequence[Mapping[str, Any]],
    servers: Sequence[Mapping[str, Any]],
    clients: Sequence[Mapping[str, Any]],
    taken_at: datetime,
) -> PoolerSnapshot:
    return PoolerSnapshot(
        taken_at=taken_at,
        pool_modes={
            (str(row.get("database")), str(row.get("user"))): str(row.get("pool_mode") or "")
            for row in pools
        },
        servers=tuple(connection_from_row(row) for row in servers),
        clients=tuple(connection_from_row(row) for row in clients),
    )


class PgBouncerSampler:
    """Polls one pgbouncer admin console over a persistent connection."""

    def __init__(self, dsn: str, *, connect_timeout: float = 5.0) -> None:
        self._dsn = dsn
        self._secrets = dsn_secrets(dsn)
        self._connect_timeout = connect_timeout
        self._conn: psycopg.Connection[Any] | None = None

    @property
    def where(self) -> str:
        return describe_dsn(self._dsn)

    def sample(self, context: SampleContext) -> PoolerSnapshot:
        """One reading (a source of its target: see lockwatch.sources)."""
        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(
                    self._dsn,
                    autocommit=True,
                    connect_timeout=max(1, round(self._connect_timeout)),
                    cursor_factory=psycopg.ClientCursor,
                )
            conn = self._conn
            snapshot = snapshot_from_rows(
                _rows(conn, "SHOW POOLS"),
                _rows(conn, "SHOW SERVERS"),
                _rows(conn, "SHOW CLIENTS"),
                context.now,
            )
        except (psycopg.Error, OSError) as exc:
            self.close()
            raise SampleError(
                redact(f"pgbouncer {self.where}: {first_line(exc)}", self._secrets)
            ) from None
        return snapshot

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

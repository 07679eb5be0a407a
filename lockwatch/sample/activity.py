"""Rows of ``pg_stat_activity`` as :class:`~lockwatch.model.locks.Backend` values,
for every query that selects sessions (the lock holders, a worker group's)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

import psycopg
from psycopg.rows import tuple_row
from psycopg.types.string import ByteaBinaryLoader

from lockwatch.model.incidents import LiveSession
from lockwatch.model.locks import Backend
from lockwatch.sample.base import SampleError
from lockwatch.sample.session import TEXT_TYPES, TargetSession

QUERY_CHARS = 1024  # enough to recognise a statement, bounded whatever clients send


def backend_from_row(row: Mapping[str, Any]) -> Backend:
    """A ``pg_stat_activity`` row, selected with the columns the queries here use."""
    return Backend(
        pid=row["pid"],
        backend_start=row["backend_start"],
        database=row["datname"],
        usename=row["usename"],
        application_name=row["application_name"] or "",
        client_addr=row["client_addr"],
        state=row["state"],
        state_change=row["state_change"],
        xact_start=row["xact_start"],
        query_start=row["query_start"],
        wait_event_type=row["wait_event_type"],
        wait_event=row["wait_event"],
        # '<insufficient privilege>' is the server's word for a hidden query, not one.
        query=(row["query"] or "") if row["visible"] else "",
        blocked_by=tuple(row.get("blocked_by") or ()),
        client_port=row["client_port"],
        client_hostname=row["client_hostname"] if row["visible"] else None,
        visible=row["visible"],
        query_id=row.get("query_id") if row["visible"] else None,
    )


class SessionRows:
    """The sessions of the lock holders, read poll after poll. Their rows come
    back as tuples with text as the server's bytes (psycopg's C bytea loader:
    no Python call per value), and a row equal to the last one read for its
    pid gives back the very same Backend: a quiet poll decodes no text and
    builds no object, and what follows sees at a glance that nothing changed
    (``MovedBackends``). A changed row's text is decoded as ``CLIENT_TEXT``
    would: bytes that are not UTF-8 show as U+FFFD."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[tuple[Any, ...], Backend]] = {}

    @staticmethod
    def cursor(conn: psycopg.Connection[Any]) -> psycopg.Cursor[tuple[Any, ...]]:
        """A cursor whose rows ``backends`` takes (the query's text columns as bytes)."""
        cursor = conn.cursor(row_factory=tuple_row)
        for name in TEXT_TYPES:
            cursor.adapters.register_loader(name, ByteaBinaryLoader)
        return cursor

    def backends(self, cursor: psycopg.Cursor[tuple[Any, ...]]) -> dict[int, Backend]:
        """The sessions of the cursor's rows (binary, from ``cursor()``), by pid."""
        made: dict[int, Backend] = {}
        names: list[str] | None = None
        for row in cursor.fetchall():
            pid = row[0]
            seen = self._seen.get(pid)
            if seen is None or seen[0] != row:
                # The names once, and only for a changed row: psycopg makes
                # an object per column each time it describes them, and a
                # busy client's row changes at every poll.
                names = names or [column.name for column in cursor.description or ()]
                seen = self._seen[pid] = (row, _backend(names, row))
            made[pid] = seen[1]
        return made

    def keep(self, pids: Iterable[int]) -> None:
        """Forget every session but ``pids`` (this poll's)."""
        self._seen = {pid: seen for pid in pids if (seen := self._seen.get(pid)) is not None}


def _backend(names: list[str], row: tuple[Any, ...]) -> Backend:
    text = (v.decode("utf-8", "replace") if type(v) is bytes else v for v in row)
    return backend_from_row(dict(zip(names, text, strict=True)))


def live_sessions(
    session: TargetSession, wanted: Collection[LiveSession]
) -> frozenset[LiveSession] | None:
    """Which of ``wanted`` still exist on the server (pid + backend_start; a
    pid without its start counts as itself); None when that cannot be read.
    One query, for the holders whose locks are gone from the last poll: did
    they let go, or did their session end?"""
    if not wanted:
        return frozenset()
    try:
        rows = session.query(
            "SELECT pid, backend_start FROM pg_stat_activity WHERE pid = ANY(%(pids)s)",
            {"pids": sorted({pid for pid, _ in wanted})},
        )
    except SampleError:
        return None
    present = {(int(row["pid"]), row["backend_start"]) for row in rows}
    pids = {pid for pid, _ in present}
    return frozenset(
        (pid, start)
        for pid, start in wanted
        if (pid, start) in present or (start is None and pid in pids)
    )

"""Rows of ``pg_stat_activity`` as :class:`~lockwatch.model.locks.Backend` values,
for every query that selects sessions (the lock holders, a worker group's)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lockwatch.model.locks import Backend

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
        visible=row["visible"],
    )

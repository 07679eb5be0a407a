"""What ``doctor`` says about sessions whose activity the server does not track.

With ``track_activities = off`` (server-wide, or SET by a superuser in one
session) ``pg_stat_activity`` shows the session's state as ``disabled``, with
no query and no time of its last change: lockwatch then cannot tell whether a
holder is idle, so an orphaned lock it holds is never reported.
"""

from __future__ import annotations

from typing import Any

import psycopg

from lockwatch.model.locks import UNTRACKED_STATE


def tracking_notes(conn: psycopg.Connection[Any]) -> tuple[str, ...]:
    """Warnings, if any, about track_activities on the server ``conn`` reaches."""
    row = conn.execute(
        "SELECT current_setting('track_activities'),"
        " (SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE state = %s)",
        (UNTRACKED_STATE,),
    ).fetchone()
    assert row is not None
    setting, untracked = str(row[0]), int(row[1])
    notes = []
    if setting != "on":
        notes.append(
            "warning: track_activities is off on this server: lockwatch cannot see whether a "
            "holder is idle, so orphaned locks go unreported; set track_activities = on"
        )
    if untracked:
        notes.append(
            f"warning: {untracked} session(s) run with track_activities off (state "
            f"'{UNTRACKED_STATE}' in pg_stat_activity): their locks show as \"not tracked\" and "
            "are never judged idle or orphaned"
        )
    return tuple(notes)

"""What lockwatch's polls cost the server they watch, as the server counts it:
the execution time pg_stat_statements has for lockwatch's role in the
target's database, read once a minute and divided by the polls since.

Reading pg_stat_statements walks its whole table (up to
``pg_stat_statements.max`` entries), so it is read once a minute, not each
poll. Where the extension is not installed in the target's database (or not
preloaded), or where it counts none of lockwatch's statements
(``pg_stat_statements.track = none`` for its role or database), nothing is
known: said once in the log, and looked for again every ten minutes. Everything lockwatch's role runs in the database counts,
every monitor's statement with the locks': a role shared with other clients,
or several lockwatch replicas under one role, add theirs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import cache
from importlib import resources

from psycopg import sql

from lockwatch.sample.base import SampleError
from lockwatch.sample.session import TargetSession

log = logging.getLogger(__name__)

EVERY = 60.0  # seconds between readings
LOOK_AGAIN = 600.0  # seconds before looking again for a missing pg_stat_statements
UNKNOWN = "lockwatch cannot tell what its polls cost the server (lockwatch_poll_server_seconds)"
FIND = (
    "SELECT n.nspname FROM pg_catalog.pg_extension AS e"
    " JOIN pg_catalog.pg_namespace AS n ON n.oid = e.extnamespace"
    " WHERE e.extname = 'pg_stat_statements'"
)


@cache
def own_server_time_query(schema: str, server_version: int) -> sql.Composed:
    text = (resources.files("lockwatch.sample") / "sql" / "own_server_time.sql").read_text(
        encoding="utf-8"
    )
    column = "total_exec_time" if server_version >= 130000 else "total_time"
    return sql.SQL(text).format(
        statements=sql.Identifier(schema, "pg_stat_statements"),
        exec_time=sql.Identifier(column),
    )


class PollServerTime:
    """A target's server time per poll, poll after poll (``after_poll``)."""

    def __init__(self, every: float = EVERY, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds: float | None = None  # per poll, between the last two readings
        self._every = every
        self._clock = clock
        self._polls = 0
        self._due = 0.0  # the first poll reads
        self._last: tuple[float, int] | None = None  # exec ms and polls at the last reading
        self._schema: str | None = None
        self._missing: str | None = None  # why it cannot be read, once said

    def after_poll(self, session: TargetSession) -> float | None:
        """Count a poll; once a minute read the role's total. The server
        seconds per poll as of the last two readings (None: not known)."""
        self._polls += 1
        now = self._clock()
        if now < self._due:
            return self.seconds
        self._due = now + self._every
        try:
            exec_ms = self._read(session)
        except SampleError as exc:
            self._lost(f"{exc}: {UNKNOWN}")
            return self.seconds
        if isinstance(exec_ms, str):
            self._lost(f"{session.where}: {exec_ms}: {UNKNOWN}")
            return self.seconds
        if self._missing is not None:
            log.info("%s: pg_stat_statements can be read again", session.where)
            self._missing = None
        last, self._last = self._last, (exec_ms, self._polls)
        # A reset or an evicted entry makes the total go back: start again from it.
        if last is not None and exec_ms >= last[0] and self._polls > last[1]:
            self.seconds = (exec_ms - last[0]) / 1000 / (self._polls - last[1])
        return self.seconds

    def _read(self, session: TargetSession) -> float | str:
        """The role's execution ms in the database so far, or why it is not known."""
        with session.step("pg_stat_statements read", "pg_read_all_stats") as conn:
            if self._schema is None:
                row = conn.execute(FIND).fetchone()
                if row is None:
                    return "pg_stat_statements is not installed there"
                self._schema = str(row["nspname"])
            query = own_server_time_query(self._schema, session.server_version)
            found = conn.execute(query).fetchone()
        if found is None or found["exec_ms"] is None:
            return (
                "pg_stat_statements counts none of lockwatch's statements there "
                "(pg_stat_statements.track is none for its role or database?)"
            )
        return float(found["exec_ms"])

    def _lost(self, reason: str) -> None:
        self.seconds, self._last, self._schema = None, None, None
        self._due = self._clock() + LOOK_AGAIN
        if self._missing != reason:
            log.info("%s", reason)
            self._missing = reason

"""The target's session: one read-only connection per monitored server, shared by
every source that reads the target's own database in a poll.

It takes no locks of its own and needs no more than the ``pg_monitor`` role;
without it, other roles' sessions are hidden from it, which it reads once per
connection (``visibility``) and says once in the log.
Through a connection pooler (a DSN pointed at pgbouncer) it prepares no
statement on the server and sets nothing on the session: through a transaction
pool either would land on a backend that other clients get next (see
sample/pooling.py). Each step runs in a transaction of its own instead, with
lockwatch's settings for that transaction alone; such a target gets a
``target_transaction_pooled``.
Every network step a source takes through it is timed, so the runner's
watchdog can break a step that hangs on a silent server (``abort``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.abc import Buffer
from psycopg.adapt import AdaptersMap, Loader
from psycopg.pq import Format
from psycopg.rows import dict_row

from lockwatch.model.locks import HIDDEN_SESSION_LOSSES, SessionVisibility
from lockwatch.model.pooler import POOLED_SESSION_LOSSES, SessionPooling
from lockwatch.model.servers import WHOLE_SERVER, LockScope, ServerIdentity, ServerSeat
from lockwatch.sample.base import SampleError, TargetUnavailableError, TimedOutError
from lockwatch.sample.pooling import per_transaction, through_pooler
from lockwatch.text import one_line
from lockwatch.util.secrets import describe_dsn, dsn_secrets, first_line, redact

log = logging.getLogger(__name__)

APPLICATION_NAME = "lockwatch"
LOCK_TIMEOUT_MS = 1000  # lockwatch takes no locks; this guards catalog reads all the same
WORK_MEM = "32MB"  # enough to copy 100,000 locks without a temp file
# A live server cancels a slow statement itself at statement_timeout, so
# nothing of lockwatch's keeps running there; no answer this long after that
# means the server, or the path to it, has gone silent.
WATCHDOG_MARGIN = 1.0
# How long the pooler probe lets a statement wait for a server connection.
POOLING_QUEUE_WAIT = 1.0

Connection = psycopg.Connection[dict[str, Any]]

# lockwatch's settings, for its session (a direct connection) or for the
# transaction of one step (through a transaction pooler).
SESSION_SETTINGS = (
    "SELECT pg_catalog.set_config('statement_timeout', %(st)s, false),"
    " pg_catalog.set_config('lock_timeout', %(lt)s, false),"
    " pg_catalog.set_config('default_transaction_read_only', 'on', false),"
    " pg_catalog.set_config('idle_in_transaction_session_timeout', %(st)s, false),"
    " pg_catalog.set_config('work_mem', %(wm)s, false)"
)
LOCAL_SETTINGS = (
    "SELECT pg_catalog.set_config('statement_timeout', %(st)s, true),"
    " pg_catalog.set_config('lock_timeout', %(lt)s, true),"
    " pg_catalog.set_config('transaction_read_only', 'on', true),"
    " pg_catalog.set_config('idle_in_transaction_session_timeout', %(st)s, true),"
    " pg_catalog.set_config('work_mem', %(wm)s, true)"
)

# What the session's setup reads: the server's version, the session's pid,
# what the role may see, and which server and database it reached (the
# system identifier only where the role may read pg_control_system(); a
# managed service may revoke it).
SETUP_QUERY = (
    "SELECT pg_catalog.current_setting('server_version_num')::int AS v,"
    " pg_catalog.pg_backend_pid() AS pid, current_user AS role,"
    " pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE') AS sees_all,"
    " pg_catalog.current_database() AS database, pg_catalog.now() AS now,"
    " pg_catalog.pg_postmaster_start_time() AS started,"
    " CASE WHEN pg_catalog.has_function_privilege("
    "'pg_catalog.pg_control_system()', 'EXECUTE')"
    " THEN (SELECT system_identifier FROM pg_catalog.pg_control_system()) END AS system"
)

# The DSNs (as user@host:port/db) already said to go through a transaction pooler.
_ANNOUNCED: set[str] = set()
# ... and already said to see only their own roles' sessions.
_BLIND: set[str] = set()


class _ClientText(Loader):
    """Text as any client left it: a session in a SQL_ASCII database can put
    bytes that are not UTF-8 into its query, and pg_stat_activity hands them
    on unchecked. One such client must not fail every poll: bad bytes show
    as U+FFFD instead."""

    def load(self, data: Buffer) -> str:
        return bytes(data).decode("utf-8", errors="replace")


class _ClientTextBinary(_ClientText):
    format = Format.BINARY


TEXT_TYPES = ("text", "varchar", "name", "bpchar")
CLIENT_TEXT = AdaptersMap(psycopg.adapters)
for _type in TEXT_TYPES:
    CLIENT_TEXT.register_loader(_type, _ClientText)
    CLIENT_TEXT.register_loader(_type, _ClientTextBinary)


class TargetSession:
    """One target's connection. Not thread-safe except for ``abort`` and
    ``busy_since``, which the watchdog reads from another thread."""

    def __init__(
        self,
        dsn: str,
        *,
        connect_timeout: float = 5.0,
        statement_timeout: float = 5.0,
        monotonic: Callable[[], float] = time.monotonic,
        seat: ServerSeat | None = None,
    ) -> None:
        self._dsn = dsn
        # The target's place among the targets of its server (None: alone).
        self.seat = seat
        self._secrets = dsn_secrets(dsn)
        self.connect_timeout = connect_timeout
        self.statement_timeout = statement_timeout
        self._monotonic = monotonic
        self._conn: Connection | None = None
        self._guard = threading.Lock()
        self.server_version = 0
        # Monotonic time the network step in progress began; None between steps.
        self.busy_since: float | None = None
        # A step is overdue this long after it began. Timed from the first
        # query, the connection being made: a silent server fails the poll
        # within interval + statement_timeout + margin of going silent, two
        # intervals while statement_timeout + margin is under the interval
        # (the defaults: 5 s + 1 s of 10 s).
        self.step_limit = statement_timeout + WATCHDOG_MARGIN
        self._aborted = False
        # A pooler answers this DSN: no server-side prepared statements and no
        # session settings. Seen on every connect (it costs nothing).
        self.through_pooler = False
        # ... and it hands out server connections per transaction: probed once
        # per process, on the first connection through a pooler.
        self.pooling: SessionPooling | None = None
        self._probed = False
        # What the role may see of other sessions, as of the last connection.
        self.visibility: SessionVisibility | None = None
        # Which server and database the last connection reached.
        self.identity: ServerIdentity | None = None

    @property
    def where(self) -> str:
        return describe_dsn(self._dsn)

    @property
    def connected(self) -> bool:
        # A connection the watchdog broke (or the server dropped) is not one.
        with self._guard:
            conn = self._conn
        return conn is not None and not conn.closed and not conn.broken

    @property
    def prepare(self) -> bool:
        """Whether statements may be prepared on the server (not through a pooler)."""
        return not self.through_pooler

    def _set_up(self, conn: Connection) -> None:
        """The session's setup on a fresh connection: which server it is, whether
        a transaction pooler stands between, and lockwatch's settings."""
        # Not prepared, nor auto-prepared until the pooler question is settled.
        threshold, conn.prepare_threshold = conn.prepare_threshold, None
        row = conn.execute(SETUP_QUERY).fetchone()
        self.server_version = int(row["v"]) if row else 0
        if row is not None:
            self._saw(SessionVisibility(str(row["role"]), bool(row["sees_all"])))
            system = None if row["system"] is None else int(row["system"])
            self.identity = ServerIdentity(system, row["started"], row["now"], row["database"])
            if self.seat is not None:
                self.seat.connected(self.identity)
        self.through_pooler = row is not None and through_pooler(conn, int(row["pid"]))
        if self.through_pooler:
            self._probe_pooling()
        else:
            conn.prepare_threshold = threshold
            self._set_session(conn)

    def _saw(self, visibility: SessionVisibility) -> None:
        """What the role may see; said once per process when it cannot see
        other roles' sessions (a reload's new session knows it already)."""
        self.visibility = visibility
        if visibility.sees_all_sessions or self.where in _BLIND:
            return
        _BLIND.add(self.where)
        log.warning(
            "%s: lockwatch's role %s lacks pg_monitor (GRANT pg_monitor TO %s): %s",
            self.where,
            one_line(visibility.role),
            one_line(visibility.role),
            "; ".join(HIDDEN_SESSION_LOSSES),
        )

    def _connect(self) -> Connection:
        # Keepalives and tcp_user_timeout make a silently dead peer fail the
        # poll instead of hanging it; the watchdog's abort() covers the rest.
        return psycopg.connect(
            self._dsn,
            application_name=APPLICATION_NAME,
            connect_timeout=max(1, round(self.connect_timeout)),
            keepalives=1,
            keepalives_idle=10,
            keepalives_interval=5,
            keepalives_count=3,
            tcp_user_timeout=int((self.statement_timeout + self.connect_timeout) * 1000),
            autocommit=True,
            row_factory=dict_row,
            context=CLIENT_TEXT,
        )

    def _set_session(self, conn: Connection, *, local: bool = False) -> None:
        """lockwatch's settings, for the session, or (``local``) for the
        transaction in progress: through a transaction pooler a session setting
        would stay on a backend that other clients get next.

        Session settings go through SET rather than the ``options`` startup
        parameter, which connection poolers reject. pg_lock_status() copies
        the lock table into memory bounded by work_mem and spills the rest to a
        temp file: past ~25,000 locks at the default 4MB, writing and reading it
        back was an eighth of the poll's server time.
        """
        conn.execute(
            LOCAL_SETTINGS if local else SESSION_SETTINGS,
            {
                "st": str(int(self.statement_timeout * 1000)),
                "lt": str(LOCK_TIMEOUT_MS),
                "wm": WORK_MEM,
            },
        )

    def _probe_pooling(self) -> None:
        """Once per process: does the pooler hand out server connections per
        transaction? Said once in the log, and kept for the target's finding."""
        if self._probed:
            return
        self._probed = True
        try:
            with self._connect() as first, self._connect() as second:
                first.prepare_threshold = second.prepare_threshold = None
                evidence = per_transaction(first, second, POOLING_QUEUE_WAIT)
        except (psycopg.Error, OSError) as exc:
            log.warning(
                "%s: could not tell how the pooler in front pools: %s",
                self.where,
                redact(first_line(exc), self._secrets),
            )
            return
        if evidence is None:
            log.info(
                "%s: a pooler answers this DSN and kept each session on its backend; "
                "lockwatch prepares no statements through it and runs each step in a "
                "transaction of its own",
                self.where,
            )
            return
        self.pooling = SessionPooling(datetime.now(UTC), evidence, self.where)
        # Said once per process: a reload's new session knows it already.
        first_time = self.where not in _ANNOUNCED
        _ANNOUNCED.add(self.where)
        log.log(
            logging.WARNING if first_time else logging.DEBUG,
            "%s: lockwatch's session goes through a transaction pooler (%s). Reading "
            "pg_locks this way is fine, but give lockwatch a direct DSN so that its session "
            "stays one backend; meanwhile %s",
            self.where,
            evidence,
            "; ".join(POOLED_SESSION_LOSSES),
        )

    def connect(self) -> None:
        """Open the session if there is none. Raises SampleError.

        Making the connection is bounded by connect_timeout (``abort()``
        cannot break a connection still being made); the session's setup is
        a step like any query, timed for the watchdog: behind a pooler whose
        pool is exhausted, the connection is accepted at once and the first
        statement waits for a server connection (pgbouncer's
        query_wait_timeout, for ever with 0).
        """
        if self.connected:
            return
        try:
            conn = self._connect()
        except (psycopg.Error, OSError) as exc:
            if self.seat is not None:
                self.seat.failed()
            raise self._failed(exc, "poll query") from None
        with self._guard:
            self._conn = conn
        # A new connection is set up in autocommit, whatever the last one was.
        self.through_pooler = False
        with self.step("session setup", keep_open=False) as setting_up:
            self._set_up(setting_up)

    def lock_scope(self, seen: datetime | None = None) -> LockScope:
        """The databases whose advisory locks this target judges (the whole
        server unless other targets read the same one); ``seen``: the server's
        time at the last read, which keeps the server's identity current."""
        if self.seat is None or self.identity is None:
            return WHOLE_SERVER
        return self.seat.scope(seen)

    @contextlib.contextmanager
    def step(
        self, what: str = "poll query", grant: str = "pg_monitor", *, keep_open: bool = True
    ) -> Iterator[Connection]:
        """The connection for one network step, timed for the watchdog.

        A step that fails raises SampleError saying ``what`` failed and, for a
        missing privilege, what to ``grant``. A broken session is closed for
        the next poll to reopen; so is any session whose step failed unless
        ``keep_open`` (a statement in autocommit leaves it usable).
        """
        with self._guard:
            conn = self._conn
        if conn is None or conn.closed:
            raise TargetUnavailableError(f"{self.where}: not connected")
        self._aborted = False
        self.busy_since = self._monotonic()
        try:
            if self.through_pooler:
                # One transaction keeps the step on one backend, with the
                # settings for it alone.
                with conn.transaction():
                    self._set_session(conn, local=True)
                    yield conn
            else:
                yield conn
        except (psycopg.Error, OSError) as exc:
            if not keep_open or conn.closed or conn.broken:
                self.close()
            raise self._failed(exc, what, grant) from None
        finally:
            self.busy_since = None

    def query(
        self, query: str | sql.SQL | sql.Composed, params: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """Run another read-only query on the poll's session (a queue's depth,
        the workers' sessions), once the session is connected.

        A query that fails leaves the session usable (it runs in autocommit);
        only a broken connection is closed, for the next poll to reopen.
        """
        with self.step("query", "SELECT on its tables") as conn:
            cursor = conn.execute(query, params)
            return cursor.fetchall() if cursor.description is not None else []

    def _failed(
        self, exc: psycopg.Error | OSError, what: str, grant: str = "pg_monitor"
    ) -> SampleError:
        if isinstance(exc, psycopg.Error):
            message = self._explain(exc, what, grant)
        else:
            self.close()  # a socket error leaves nothing to reuse
            message = redact(f"{self.where}: {exc}", self._secrets)
        if self._aborted:
            message = f"poll did not answer within {self.step_limit:g}s ({message})"
            return SampleError(message)
        timed_out = (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable)
        return TimedOutError(message) if isinstance(exc, timed_out) else SampleError(message)

    def _explain(self, exc: psycopg.Error, what: str, grant: str) -> str:
        if isinstance(exc, psycopg.errors.QueryCanceled):
            reason = f"{what} cancelled by statement_timeout ({self.statement_timeout:g}s)"
        elif isinstance(exc, psycopg.errors.InsufficientPrivilege):
            reason = f"insufficient privilege (grant {grant} to the role): {exc}"
        else:
            reason = first_line(exc)
        return redact(f"{self.where}: {reason}", self._secrets)

    def overdue(self, now: float) -> bool:
        """Whether the step in progress has run past ``step_limit`` at ``now``
        (monotonic) and has not been broken yet."""
        started = self.busy_since
        return started is not None and not self._aborted and now - started > self.step_limit

    def abort(self) -> None:
        """Break a step that is stuck on a silent server, from another thread.

        Shutting the socket down wakes the blocked read with an error; closing
        the connection object itself from here would race with the reader.
        """
        with self._guard:
            conn = self._conn
        if conn is None or conn.closed:
            return
        self._aborted = True
        try:
            fd = os.dup(conn.fileno())
        except (OSError, psycopg.Error):
            return
        with socket.socket(fileno=fd) as sock, contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        with self._guard:
            conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                log.debug("closing the connection to %s failed", self.where)

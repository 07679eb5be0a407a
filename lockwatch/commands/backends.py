"""``lockwatch terminate``'s I/O: the incident's root as the actions role sees
it now, and the guarded statements that end it. Every statement is in a
``.sql`` file beside this one; the guard is in the statement that acts (the
pid's backend_start), so nothing can change between the check and the signal.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from lockwatch.commands.guard import HeldNow, Look, PreparedNow, RoleFacts, SessionNow
from lockwatch.model.incidents import IncidentRoot, RootKind
from lockwatch.model.locks import LockKey
from lockwatch.util.secrets import describe_dsn, dsn_secrets, first_line, redact

CONNECT_TIMEOUT = 5
STATEMENT_TIMEOUT_MS = 5000
WAIT_STEP = 0.1  # seconds between looks while waiting for the root to go

Connection = psycopg.Connection[dict[str, Any]]


class ActionError(RuntimeError):
    """The database could not be reached or answered with an error; the
    message is free of secrets."""


def _query(name: str) -> str:
    return (resources.files("lockwatch.commands") / "sql" / name).read_text(encoding="utf-8")


def connect(dsn: str, database: str | None = None) -> Connection:
    """The actions role's connection (to ``database`` instead of the DSN's, for
    ROLLBACK PREPARED, which runs only in the prepared transaction's database)."""
    try:
        return psycopg.connect(
            dsn if database is None else make_conninfo(dsn, dbname=database),
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT,
            application_name="lockwatch-terminate",
            options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS}",
            row_factory=dict_row,
        )
    except psycopg.Error as exc:
        raise failure(dsn, exc) from None


def failure(dsn: str, exc: psycopg.Error) -> ActionError:
    return ActionError(redact(f"{describe_dsn(dsn)}: {first_line(exc)}", dsn_secrets(dsn)))


def _server(conn: Connection) -> str:
    info = conn.info
    return f"{info.host}:{info.port}/{info.dbname}"


def _role(conn: Connection) -> RoleFacts:
    row = conn.execute(_query("actions_role.sql")).fetchone()
    assert row is not None  # current_user is always a role
    return RoleFacts(
        str(row["role"]), *(bool(row[k]) for k in ("superuser", "signals", "sees_all"))
    )


def _held(conn: Connection, pid: int | None, xid: int | None) -> tuple[HeldNow, ...]:
    rows = conn.execute(_query("actions_held.sql"), {"pid": pid, "xid": xid}).fetchall()
    return tuple(
        sorted(
            HeldNow(
                f"{row['database']}/"
                f"{LockKey.from_pg_locks(row['classid'], row['objid'], row['objsubid']).render()}",
                int(row["waiters"]),
            )
            for row in rows
        )
    )


def _session(conn: Connection, pid: int) -> SessionNow | None:
    row = conn.execute(_query("actions_session.sql"), {"pid": pid}).fetchone()
    if row is None:
        return None
    return SessionNow(
        backend_start=row["backend_start"],
        state=row["state"],
        usename=row["usename"],
        application_name=row["application_name"],
        client_addr=row["client_addr"],
        xact_seconds=None if row["xact_seconds"] is None else float(row["xact_seconds"]),
        state_seconds=None if row["state_seconds"] is None else float(row["state_seconds"]),
        same_role=bool(row["same_role"]),
        superuser_session=bool(row["superuser_session"]),
    )


def _prepared(conn: Connection, gid: str) -> PreparedNow | None:
    row = conn.execute(_query("actions_prepared.sql"), {"gid": gid}).fetchone()
    if row is None:
        return None
    return PreparedNow(
        int(row["xid"]), row["prepared"], str(row["owner"]), str(row["database"]), bool(row["owns"])
    )


def look(conn: Connection, root: IncidentRoot) -> Look:
    """The root as the connection's role sees it now."""
    role, server = _role(conn), _server(conn)
    if root.kind is RootKind.PREPARED:
        prepared = _prepared(conn, root.gid or "")
        held = () if prepared is None else _held(conn, None, prepared.xid)
        return Look(role, server, prepared=prepared, held=held)
    pid = int(root.pid or 0)
    session = _session(conn, pid)
    return Look(role, server, session=session, held=_held(conn, pid, None))


def signal(conn: Connection, root: IncidentRoot, *, cancel: bool) -> bool:
    """pg_terminate_backend (or pg_cancel_backend) of the root's pid, only while
    it is the session that started at the root's backend_start; False when no
    such session was there to signal."""
    statement = _query("actions_cancel.sql" if cancel else "actions_terminate.sql")
    row = conn.execute(statement, {"pid": root.pid, "backend_start": root.backend_start}).fetchone()
    return row is not None and bool(row["signalled"])


def rollback_prepared(conn: Connection, gid: str) -> None:
    conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))


def wait_for(check: Callable[[], bool], seconds: float) -> bool:
    """Whether ``check`` came true within ``seconds``, looking every WAIT_STEP."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() >= deadline:
            return False
        time.sleep(WAIT_STEP)
    return True


def session_gone(conn: Connection, pid: int, backend_start: datetime | None) -> bool:
    session = _session(conn, pid)
    return session is None or session.backend_start != backend_start


def statement_done(conn: Connection, pid: int) -> bool:
    session = _session(conn, pid)
    return session is None or session.state != "active"


def prepared_gone(conn: Connection, gid: str) -> bool:
    return _prepared(conn, gid) is None

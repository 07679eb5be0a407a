"""The guarded SQL an incident's next step prints for a person (lockwatch never
runs it), and what running it costs, following the holder's state.

The statement that ends a holding session works for the role the runbooks
name (``pg_signal_backend`` and ``pg_read_all_stats``, or ``pg_monitor``) and
says in its one row which of the things that look alike happened: the session
ended, it is gone already, its pid went to another session, the role running
it cannot see the session's start (PostgreSQL shows another role's
``backend_start`` as NULL without ``pg_read_all_stats``, so no guard could
match), or it holds no lock any more (its own transaction's virtualxid aside: one that
blocks a migration on a table lock is ended too). Nothing is signalled unless
the pid is still the session that started at the incident's
``backend_start``, checked in the same statement that signals it. A role that
may not signal the session gets PostgreSQL's own error. ``lockwatch terminate
<incident id>`` is the same act with a dry run first and the incident's own
locks checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from lockwatch.model.evidence import PooledLockEvidence
from lockwatch.model.findings import Finding
from lockwatch.text import format_duration, iso_text

# What each outcome of ``terminate_sql`` begins with (the runbooks and their
# tests read them): the word before the colon.
OUTCOMES = ("terminated", "gone", "hidden", "reused", "released", "not signalled")
GUARD_ROLES = "pg_signal_backend and pg_read_all_stats (or pg_monitor)"
# Characters of a next step's SQL every surface shows whole (it must run as
# printed): lockwatch's own statement, whose one client value, a gid, PostgreSQL
# bounds to 200 bytes.
SQL_LIMIT = 1500
IN_TRANSACTION = frozenset({"idle in transaction", "idle in transaction (aborted)"})


def sql_literal(text: str) -> str:
    """``text`` as a PostgreSQL string literal, whatever standard_conforming_strings says.

    >>> sql_literal("it's")
    "'it''s'"
    >>> sql_literal("a\\\\b")
    "E'a\\\\\\\\b'"
    """
    quoted = text.replace("'", "''")
    if "\\" in text:
        return "E'" + quoted.replace("\\", "\\\\") + "'"
    return f"'{quoted}'"


def terminate_sql(pid: int, backend_start: datetime) -> str:
    """End the session with ``pid`` only while it is the one that started at
    ``backend_start``; its one row says what happened.

    >>> from datetime import UTC
    >>> start = datetime(2026, 12, 1, 12, 0, 0, 250000, tzinfo=UTC)
    >>> for part in terminate_sql(7023, start).split(" WHEN "):
    ...     print(part[:90].rstrip())
    SELECT CASE
    a.pid IS NULL THEN 'gone: no session has pid 7023 now: nothing to end'
    a.backend_start IS NULL THEN 'hidden: your role cannot see when pid 7023 started: nothing
    a.backend_start <> '2026-12-01T12:00:00.250000+00:00' THEN 'reused: pid 7023 is another se
    NOT EXISTS (SELECT FROM pg_locks l WHERE l.pid = a.pid AND l.granted AND l.locktype <> 'vi
    pg_terminate_backend(a.pid) THEN 'terminated: pid 7023 is ending; its locks go free' ELSE
    """
    # Printed for a person, never run by lockwatch; the pid is an int and the
    # one text value is quoted by sql_literal. CASE tries its branches in
    # order, so pg_terminate_backend (volatile) runs only past every guard.
    pid = int(pid)
    start = sql_literal(iso_text(backend_start))
    # One line, as every surface shows an incident's SQL (a log line, an alert).
    return " ".join(
        (
            "SELECT CASE",
            f"WHEN a.pid IS NULL THEN 'gone: no session has pid {pid} now: nothing to end'",
            f"WHEN a.backend_start IS NULL THEN 'hidden: your role cannot see when pid {pid} "
            "started: nothing done (GRANT pg_read_all_stats, or pg_monitor, to it)'",
            f"WHEN a.backend_start <> {start} THEN 'reused: pid {pid} is another session now, "
            "started ' || a.backend_start || ': nothing done'",
            "WHEN NOT EXISTS (SELECT FROM pg_locks l WHERE l.pid = a.pid AND l.granted AND "
            f"l.locktype <> 'virtualxid') THEN 'released: pid {pid} holds no lock now: nothing "
            "done'",
            f"WHEN pg_terminate_backend(a.pid) THEN 'terminated: pid {pid} is ending; its locks "
            "go free'",
            f"ELSE 'not signalled: pid {pid} ended meanwhile'",
            "END AS outcome",
            f"FROM (VALUES ({pid})) AS root (pid)",
            "LEFT JOIN pg_stat_activity a ON a.pid = root.pid;",
        )
    )


def cancel_sql(pid: int, backend_start: datetime) -> str:
    """Cancel the statement of ``pid`` only while it is the session that
    started at ``backend_start`` and still waits on a lock (a DDL queued
    behind a holder, with every later query queued behind it); its one row
    says what happened. Its transaction is rolled back, its session lives.

    >>> from datetime import UTC
    >>> start = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
    >>> print(cancel_sql(7024, start).split(" WHEN ")[5][:75])
    pg_cancel_backend(a.pid) THEN 'cancelled: pid 7024 stops waiting; the queue
    """
    pid = int(pid)
    start = sql_literal(iso_text(backend_start))
    return " ".join(
        (
            "SELECT CASE",
            f"WHEN a.pid IS NULL THEN 'gone: no session has pid {pid} now: nothing to cancel'",
            f"WHEN a.backend_start IS NULL THEN 'hidden: your role cannot see when pid {pid} "
            "started: nothing done (GRANT pg_read_all_stats, or pg_monitor, to it)'",
            f"WHEN a.backend_start <> {start} THEN 'reused: pid {pid} is another session now: "
            "nothing done'",
            "WHEN a.wait_event_type IS DISTINCT FROM 'Lock' THEN 'not waiting: pid "
            f"{pid} got its lock or gave up: nothing done'",
            f"WHEN pg_cancel_backend(a.pid) THEN 'cancelled: pid {pid} stops waiting; the queue "
            "behind it moves'",
            f"ELSE 'not signalled: pid {pid} ended meanwhile'",
            "END AS outcome",
            f"FROM (VALUES ({pid})) AS waiting (pid)",
            "LEFT JOIN pg_stat_activity a ON a.pid = waiting.pid;",
        )
    )


def rollback_prepared_sql(gid: str) -> str:
    """End a prepared transaction (it has no session); PostgreSQL raises when
    no prepared transaction has ``gid`` any more.

    >>> rollback_prepared_sql("batch-'7'")
    "ROLLBACK PREPARED 'batch-''7''';"
    """
    return f"ROLLBACK PREPARED {sql_literal(gid)};"


def state_cost(state: str | None, xact_seconds: float | None = None) -> str:
    """What ending a session loses, by its state.

    >>> state_cost("idle in transaction", 75)
    'its open transaction (open 1m15s) is rolled back: its work since BEGIN is lost'
    >>> state_cost("idle")
    'it has no open transaction: nothing is rolled back'
    """
    opened = f" (open {format_duration(xact_seconds)})" if xact_seconds is not None else ""
    if state in IN_TRANSACTION:
        return f"its open transaction{opened} is rolled back: its work since BEGIN is lost"
    if state == "active":
        return f"its running statement is interrupted and its transaction{opened} rolled back"
    if state == "idle":
        return "it has no open transaction: nothing is rolled back"
    return "its state is not seen: if it is in a transaction, that transaction is rolled back"


def linked_client(findings: Sequence[Finding]) -> str | None:
    """The client pgbouncer linked to a pooled holder's backend at lockwatch's
    last look (``addr:port application``); None: none, or not pooled."""
    for finding in findings:
        evidence = finding.evidence
        if isinstance(evidence, PooledLockEvidence) and evidence.linked_client is not None:
            client = evidence.linked_client
            return f"{client.addr or 'local'}:{client.port} {client.application_name or ''}".strip()
    return None


def client_cost(pooled: bool, linked_client: str | None) -> str:
    """Who sees an error when the session ends.

    >>> client_cost(True, None)[:39]
    "it is a pooler's server connection with"
    """
    if not pooled:
        return "its client gets an error on its next statement (and may retry its work)"
    if linked_client:
        return (
            "it is a pooler's server connection: the client linked to it at lockwatch's last "
            f"look ({linked_client}) gets an error"
        )
    return (
        "it is a pooler's server connection with no client linked at lockwatch's last look: "
        "no client sees an error, and the pooler opens another connection when needed"
    )


def terminate_cost(
    state: str | None,
    xact_seconds: float | None = None,
    *,
    pooled: bool = False,
    linked_client: str | None = None,
) -> str:
    """What ending a holding session costs, following its state and its client.

    >>> terminate_cost("idle")
    'it has no open transaction: nothing is rolled back; its client gets an error on its next statement (and may retry its work); every lock of its session is released at once'
    """
    return (
        f"{state_cost(state, xact_seconds)}; {client_cost(pooled, linked_client)}; "
        "every lock of its session is released at once"
    )

"""``lockwatch doctor --dsn DSN``: is session state safe on this connection string?

Checks the DSN the way an application uses it. A second session holds a
transaction open while the first runs another statement: on a direct
connection (or a session pool) the first session keeps its own backend; on a
transaction or statement pool it gets another backend, or waits for one — and
then session advisory locks, SET, LISTEN, SQL PREPARE, WITH HOLD cursors and
temporary tables cannot be trusted on it (seed 000).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import psycopg

from lockwatch.util.secrets import describe_dsn, dsn_secrets, first_line, redact

EXIT_SAFE = 0
EXIT_POOLED = 1
EXIT_ERROR = 2
# How long the first session's statement may wait for a backend while the
# second one holds a transaction; a direct connection answers at once.
QUEUE_WAIT = 3.0
ROUNDS = 3
UNSAFE_ON_POOLING = (
    "session advisory locks, SET, LISTEN, SQL PREPARE, WITH HOLD cursors and temp tables"
)


@dataclass(frozen=True, slots=True)
class Diagnosis:
    where: str
    pooled: bool
    evidence: str
    server_version: str
    role: str
    can_monitor: bool
    notes: tuple[str, ...] = field(default=())

    @property
    def exit_code(self) -> int:
        return EXIT_POOLED if self.pooled else EXIT_SAFE

    def render(self) -> str:
        verdict = (
            f"POOLED: {self.evidence}. Unsafe on this DSN: {UNSAFE_ON_POOLING}. "
            "Take leader locks over a direct DSN (or a session pool), or use "
            "pg_advisory_xact_lock inside one transaction."
            if self.pooled
            else f"SAFE for session state: {self.evidence}."
        )
        monitor = (
            "yes"
            if self.can_monitor
            else "no — lockwatch needs pg_monitor: GRANT pg_monitor TO " + self.role
        )
        lines = [
            f"lockwatch doctor: {self.where}",
            f"  server version      {self.server_version}",
            f"  role                {self.role}",
            f"  role has pg_monitor {monitor}",
            f"  verdict             {verdict}",
            *(f"  note                {note}" for note in self.notes),
        ]
        return "\n".join(lines)


def _connect(dsn: str) -> psycopg.Connection[Any]:
    # No server-side prepared statements: a transaction pool would break them.
    return psycopg.connect(
        dsn,
        autocommit=True,
        connect_timeout=5,
        prepare_threshold=None,
        application_name="lockwatch-doctor",
    )


def _backend(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    return int(row[0]) if row else -1


def _backend_within(
    conn: psycopg.Connection[Any], wait: float
) -> tuple[list[int], threading.Thread]:
    """Ask for the backend pid from a thread, waiting at most ``wait``: on a
    saturated transaction pool the question queues for a server connection."""
    answer: list[int] = []
    probe = threading.Thread(target=lambda: answer.append(_backend(conn)), daemon=True)
    probe.start()
    probe.join(wait)
    return answer, probe


def diagnose(dsn: str) -> Diagnosis:
    """Raises RuntimeError with a secret-free message when the DSN does not work."""
    secrets = dsn_secrets(dsn)
    try:
        with _connect(dsn) as first, _connect(dsn) as second:
            row = first.execute(
                "SELECT current_setting('server_version'), current_user,"
                " pg_has_role(current_user, 'pg_monitor', 'USAGE')"
                " OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)"
            ).fetchone()
            assert row is not None
            version, role, can_monitor = str(row[0]), str(row[1]), bool(row[2])
            first_pids = {_backend(first)}
            other_pids: set[int] = set()
            queued = False
            # Alternate the two sessions so that whichever order the pooler
            # hands out idle servers in (LIFO or round robin), a shared backend
            # shows up as a pid seen by both sessions or a change of pid.
            for _ in range(ROUNDS):
                with second.transaction():
                    other_pids.add(_backend(second))
                    answer, probe = _backend_within(first, QUEUE_WAIT)
                    queued = queued or probe.is_alive()
                probe.join(30)
                first_pids.update(answer)
                other_pids.add(_backend(second))
                first_pids.add(_backend(first))
    except psycopg.Error as exc:
        raise RuntimeError(redact(f"{describe_dsn(dsn)}: {first_line(exc)}", secrets)) from None
    shared = sorted(first_pids & other_pids)
    if queued:
        pooled, evidence = (
            True,
            (
                f"a statement waited {QUEUE_WAIT:g}s+ for a server connection while another client "
                "held a transaction: connections are handed out per transaction"
            ),
        )
    elif len(first_pids) > 1 or shared:
        pooled, evidence = (
            True,
            (
                f"one client session ran on backends {sorted(first_pids)}"
                + (f", and another client was given backend {shared[0]} too" if shared else "")
                + ": server connections are handed out per transaction"
            ),
        )
    else:
        (pid,) = first_pids
        pooled, evidence = False, f"one session kept backend pid {pid} across transactions"
    return Diagnosis(describe_dsn(dsn), pooled, evidence, version, role, can_monitor)

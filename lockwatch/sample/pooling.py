"""Whether a connection goes through a connection pooler, and whether that pooler
hands out server connections per transaction (pgbouncer's ``pool_mode =
transaction`` or ``statement``), told without its admin console.

A pooler answers the client's startup itself, so the backend key it hands out
(``conn.info.backend_pid``) is its own, not the pid of the server backend that
runs the statements: a free check on every connection. Whether the pooler
hands server connections out per transaction takes two more client sessions:
while one holds a transaction open, the other runs a statement. On a direct
connection (or a session pool) each session keeps its own backend; on a
transaction pool a statement gets another backend, or one another client had,
or waits for one.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg

# How long a statement may wait for a server connection while the other
# session holds a transaction; a direct connection answers at once.
QUEUE_WAIT = 3.0
ROUNDS = 3


def backend_pid(conn: psycopg.Connection[Any]) -> int:
    """The pid of the server backend that runs this statement."""
    row = conn.execute("SELECT pg_catalog.pg_backend_pid()").fetchone()
    if row is None:
        return -1
    value = row["pg_backend_pid"] if isinstance(row, dict) else row[0]
    return int(value)


def through_pooler(conn: psycopg.Connection[Any], server_pid: int) -> bool:
    """Whether the backend key of the connection's startup is not the backend's
    own: a pooler (or another proxy) answered the startup."""
    return conn.info.backend_pid != server_pid


class _Probe(threading.Thread):
    """Asks for the backend pid from a thread: on a saturated transaction pool
    the question queues for a server connection."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        super().__init__(daemon=True)
        self.conn = conn
        self.answer: list[int] = []
        self.error: psycopg.Error | None = None

    def run(self) -> None:
        try:
            self.answer.append(backend_pid(self.conn))
        except psycopg.Error as exc:  # raised by finish(), in the caller's thread
            self.error = exc

    def finish(self) -> list[int]:
        self.join(30)
        if self.error is not None:
            raise self.error
        return self.answer


def per_transaction(
    first: psycopg.Connection[Any],
    second: psycopg.Connection[Any],
    queue_wait: float = QUEUE_WAIT,
) -> str | None:
    """How ``first`` and ``second`` (two autocommit sessions on the same DSN,
    preparing nothing: ``prepare_threshold=None``) were seen to share server connections per transaction; None if they were
    not. None proves nothing on a pool busy enough to hand each a backend of
    its own every time; evidence is proof."""
    first_pids = {backend_pid(first)}
    other_pids: set[int] = set()
    queued = False
    # Alternate the two sessions so that whichever order the pooler hands out
    # idle servers in (LIFO or round robin), a shared backend shows up as a pid
    # seen by both sessions or a change of pid.
    for _ in range(ROUNDS):
        with second.transaction():
            other_pids.add(backend_pid(second))
            probe = _Probe(first)
            probe.start()
            probe.join(queue_wait)
            queued = queued or probe.is_alive()
        first_pids.update(probe.finish())
        other_pids.add(backend_pid(second))
        first_pids.add(backend_pid(first))
    shared = sorted(first_pids & other_pids)
    if queued:
        return (
            f"a statement waited {queue_wait:g}s+ for a server connection while another client "
            "held a transaction: connections are handed out per transaction"
        )
    if len(first_pids) > 1 or shared:
        return (
            f"one client session ran on backends {sorted(first_pids)}"
            + (f", and another client was given backend {shared[0]} too" if shared else "")
            + ": server connections are handed out per transaction"
        )
    return None

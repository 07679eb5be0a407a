"""Replays of the seed incidents against a real server, for the demo and the tests.

Each scenario makes real contention with real sessions; none of it is
imitated. ``start()`` sets the incident up, ``stop()`` ends it and releases
everything it holds.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import psycopg
import requests

log = logging.getLogger(__name__)


class Blackhole:
    """A TCP server on loopback that accepts connections and never answers:
    the webhook receiver of seed 002."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._accepted: list[socket.socket] = []
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="blackhole", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._listener.getsockname()[:2]
        return f"http://{host}:{port}/webhook"

    @property
    def accepted(self) -> int:
        """Connections taken so far: a call that now hangs for each."""
        return len(self._accepted)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._accepted.append(conn)

    def close(self) -> None:
        self._closed.set()
        # close() alone leaves the accept() in the other thread blocked.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for conn in self._accepted:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        self._thread.join(timeout=5)


class _Session:
    """A client session in its own thread, running ``work`` on its connection."""

    def __init__(
        self, dsn: str, application_name: str, work: Callable[[psycopg.Connection[Any]], None]
    ):
        self.conn = psycopg.connect(dsn, autocommit=True, application_name=application_name)
        self.pid = self.conn.info.backend_pid
        self.error: BaseException | None = None
        self._work = work
        self._thread = threading.Thread(target=self._run, name=application_name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            self._work(self.conn)
        except (psycopg.Error, requests.RequestException) as exc:
            self.error = exc
        finally:
            self.conn.close()

    def join(self, timeout: float) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()


class ConvoyIncident:
    """Seed 002: one worker takes ``pg_advisory_lock(key)`` and then hangs in an
    HTTP call with no timeout; the other workers queue up behind the lock."""

    def __init__(
        self, dsn: str, *, key: int = 42, waiters: int = 5, app_prefix: str = "webhook-worker"
    ) -> None:
        self.dsn = dsn
        self.key = key
        self.waiter_count = waiters
        self.app_prefix = app_prefix
        self.blackhole = Blackhole()
        self.holder: _Session | None = None
        self.waiters: list[_Session] = []
        self._lock_taken = threading.Event()

    def _hold_and_call(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute("SELECT pg_advisory_lock(%s)", (self.key,))
        self._lock_taken.set()
        # The seed's bug, on purpose: no timeout. The call returns only when
        # the black hole is closed by stop().
        with contextlib.suppress(requests.RequestException):
            requests.post(self.blackhole.url, json={"event": "order.paid"}, timeout=None)  # noqa: S113
        conn.execute("SELECT pg_advisory_unlock(%s)", (self.key,))

    def _queue_up(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute("SELECT pg_advisory_lock(%s)", (self.key,))
        conn.execute("SELECT pg_advisory_unlock(%s)", (self.key,))

    def start(self) -> None:
        self.holder = _Session(self.dsn, f"{self.app_prefix}-1", self._hold_and_call)
        self.holder.start()
        if not self._lock_taken.wait(timeout=30):
            raise RuntimeError(f"the convoy holder could not take lock {self.key}")
        for number in range(2, self.waiter_count + 2):
            waiter = _Session(self.dsn, f"{self.app_prefix}-{number}", self._queue_up)
            waiter.start()
            self.waiters.append(waiter)

    def stop(self) -> None:
        self.blackhole.close()
        for session in [self.holder, *self.waiters]:
            if session is not None and not session.join(timeout=30):
                log.warning("session %s did not finish", session.pid)


class OrphanIncident:
    """Seed 003: a session-level advisory lock taken on a pooled connection that
    goes back to the pool without an unlock, left held by an idle session."""

    def __init__(
        self, dsn: str, *, key: tuple[int, int] = (7, 13), application_name: str = "blog-generator"
    ) -> None:
        from psycopg_pool import ConnectionPool

        self.key = key
        self.pool = ConnectionPool(
            dsn,
            min_size=2,
            max_size=2,
            kwargs={"application_name": application_name, "autocommit": True},
            open=False,
        )
        self.pid: int | None = None

    def start(self) -> None:
        self.pool.open(wait=True, timeout=30)
        with self.pool.connection() as conn:
            conn.execute("SELECT pg_try_advisory_lock(%s, %s)", self.key)
            self.pid = conn.info.backend_pid

    def stop(self) -> None:
        self.pool.close()


# ---------------------------------------------------------------------------
# Seed 002 with its queue: webhook jobs claimed under lock 42

WEBHOOK_JOBS_DDL = """
CREATE TABLE IF NOT EXISTS webhook_jobs (
    id bigserial PRIMARY KEY,
    url text NOT NULL,
    payload jsonb NOT NULL DEFAULT '{}',
    status text NOT NULL DEFAULT 'pending',
    worker text,
    created_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
)
"""


_WEBHOOK_QUEUE = """SELECT count(*) FILTER (WHERE status = 'pending') AS depth,
       EXTRACT(epoch FROM now() - min(created_at) FILTER (WHERE status = 'pending'))
           AS oldest_age_seconds,
       count(*) FILTER (WHERE status = 'processing') AS in_flight{completed}{consumers}{running}
FROM webhook_jobs"""


# The jobs being delivered, each started when its worker's session last went
# idle: the claim's commit, after which the delivery runs outside SQL.
_WEBHOOK_RUNNING = """,
       (SELECT coalesce(json_agg(json_build_object(
                   'id', j.id::text, 'attempt', 1, 'started_at', a.state_change,
                   'workers', json_build_array(j.worker), 'rescued', false,
                   'sessions', json_build_array(a.pid))), '[]')
        FROM webhook_jobs j JOIN pg_stat_activity a ON a.application_name = j.worker
        WHERE j.status = 'processing') AS running_jobs"""


def webhook_queue_sql(
    *, completed: bool = True, consumers: bool = False, running: bool = False
) -> str:
    """The query an operator would give lockwatch for the webhook_jobs queue;
    without ``completed_total`` a stall can only be told by the workers' CPU.
    With ``consumers``, the workers' connected sessions are its consumers; with
    ``running``, the jobs being delivered are its running jobs."""
    done = ",\n       count(*) FILTER (WHERE status = 'done') AS completed_total"
    alive = (
        ",\n       (SELECT count(*) FROM pg_stat_activity"
        " WHERE left(application_name, 15) = 'webhook-worker-') AS consumers"
    )
    return _WEBHOOK_QUEUE.format(
        completed=done if completed else "",
        consumers=alive if consumers else "",
        running=_WEBHOOK_RUNNING if running else "",
    )


def burn_cpu(seconds: float) -> None:
    """Busy work, as a worker that renders or signs each payload."""
    deadline = time.thread_time() + seconds
    while time.thread_time() < deadline:
        sum(i * i for i in range(1000))


def claim_and_deliver(
    conn: psycopg.Connection[Any],
    http: requests.Session,
    worker: str,
    *,
    lock_key: int | None = 42,
    burn: float = 0.0,
) -> bool:
    """One job the way seed 002's workers did it; False when none was pending.

    The claim is serialised by ``pg_advisory_lock(lock_key)``, and the bug is
    kept on purpose: the lock is released only after the delivery, an HTTP
    call without a timeout.
    """
    if lock_key is not None:
        conn.execute("SELECT pg_advisory_lock(%s)", (lock_key,))
    try:
        with conn.transaction():
            row = conn.execute(
                "SELECT id, url FROM webhook_jobs WHERE status = 'pending'"
                " ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED"
            ).fetchone()
            if row is not None:
                conn.execute(
                    "UPDATE webhook_jobs SET status = 'processing', worker = %s WHERE id = %s",
                    (worker, row[0]),
                )
        if row is None:
            return False
        http.post(row[1], json={"event": "order.paid", "job": row[0]}, timeout=None)
        burn_cpu(burn)
        conn.execute(
            "UPDATE webhook_jobs SET status = 'done', finished_at = now() WHERE id = %s", (row[0],)
        )
        return True
    finally:
        if lock_key is not None and not conn.closed:
            conn.execute("SELECT pg_advisory_unlock(%s)", (lock_key,))


class Receiver:
    """A webhook receiver on loopback that answers every POST at once."""

    def __init__(self) -> None:
        class Answer(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass  # a delivery per job would flood the test output

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/webhook"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class Producer:
    """Inserts a webhook job every ``1 / rate`` seconds on a fixed schedule;
    ``url_for(n)`` says where job ``n`` (from 1) is to be delivered."""

    def __init__(self, dsn: str, rate: float, url_for: Callable[[int], str]) -> None:
        self.dsn = dsn
        self.rate = rate
        self.url_for = url_for
        self.inserted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        with psycopg.connect(
            self.dsn, autocommit=True, application_name="webhook-producer"
        ) as conn:
            due = time.monotonic()
            while not self._stop.is_set():
                conn.execute(
                    "INSERT INTO webhook_jobs (url) VALUES (%s)", (self.url_for(self.inserted + 1),)
                )
                self.inserted += 1
                due += 1 / self.rate
                self._stop.wait(max(0.0, due - time.monotonic()))

    def stop(self) -> None:
        """Stop producing; a producer never started has nothing to stop.

        >>> Producer("", 1.0, str).stop()
        """
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=10)


class WebhookQueueIncident:
    """Seed 002 whole: six workers claim webhook jobs under lock 42 while a
    producer inserts two a second; job ``poison_at`` goes to a receiver that
    never answers, and the queue grows behind the worker stuck delivering it."""

    def __init__(
        self,
        dsn: str,
        *,
        workers: int = 6,
        rate: float = 2.0,
        poison_at: int = 6,
        app_prefix: str = "webhook-worker",
    ) -> None:
        self.dsn = dsn
        self.app_prefix = app_prefix
        self.blackhole = Blackhole()
        self.receiver = Receiver()
        self.producer = Producer(
            dsn,
            rate,
            lambda n: self.blackhole.url if n == poison_at else self.receiver.url,
        )
        self.worker_count = workers
        self.workers: list[_Session] = []
        self._stop = threading.Event()

    def _work(self, name: str) -> Callable[[psycopg.Connection[Any]], None]:
        def loop(conn: psycopg.Connection[Any]) -> None:
            with requests.Session() as http:
                while not self._stop.is_set():
                    if not claim_and_deliver(conn, http, name):
                        self._stop.wait(0.05)

        return loop

    def prepare(self) -> None:
        """An empty webhook_jobs table, for lockwatch to watch before the workers start."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(WEBHOOK_JOBS_DDL)
            conn.execute("TRUNCATE webhook_jobs")

    def start(self) -> None:
        self.prepare()
        for number in range(1, self.worker_count + 1):
            name = f"{self.app_prefix}-{number}"
            worker = _Session(self.dsn, name, self._work(name))
            worker.start()
            self.workers.append(worker)
        self.producer.start()

    def stop(self) -> None:
        self.producer.stop()
        self._stop.set()
        self.blackhole.close()  # the stuck delivery fails, and its worker lets go of the lock
        for worker in self.workers:
            if not worker.join(timeout=30):
                log.warning("webhook worker %s did not finish", worker.pid)
        self.receiver.close()

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
from collections.abc import Callable
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

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._accepted.append(conn)

    def close(self) -> None:
        self._closed.set()
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

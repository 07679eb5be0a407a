"""Helpers shared by the tests: polling with a deadline, threads, per-test databases."""

from __future__ import annotations

import secrets
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, Generic, Literal, TypeVar

import psycopg
from psycopg import sql

from lockwatch.demo.pgcluster import LocalCluster, free_port

__all__ = [
    "MONITOR_PASSWORD",
    "MONITOR_USER",
    "Background",
    "PgDatabase",
    "free_port",
    "queue_on_lock",
    "run_in_thread",
    "wait_until",
]

T = TypeVar("T")

MONITOR_USER = "lockwatch_monitor"
# Random per run, so a test that leaks the password anywhere can look for it.
MONITOR_PASSWORD = "pw-" + secrets.token_hex(12)


def wait_until(
    predicate: Callable[[], T | Literal[False] | None],
    timeout: float = 20,
    interval: float = 0.05,
    message: str = "condition not met",
) -> T:
    """Poll predicate until it returns something truthy, and return that.

    >>> wait_until(lambda: 42)
    42
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{message} (waited {timeout:g}s, last value {value!r})")
        time.sleep(interval)


class Background(Generic[T]):
    """A call running in a daemon thread; its outcome is collected, never lost."""

    def __init__(self, fn: Callable[[], T]) -> None:
        self._fn = fn
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._fn()
        except BaseException as exc:  # handed to the test through result()/error()
            self._error = exc

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def join(self, timeout: float = 20) -> None:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError(f"background call still running after {timeout:g}s")

    def result(self, timeout: float = 20) -> T:
        """The return value; re-raises what the call raised."""
        self.join(timeout)
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]

    def error(self, timeout: float = 20) -> BaseException:
        """What the call raised; fails the test if it returned normally."""
        self.join(timeout)
        if self._error is None:
            raise AssertionError(f"background call returned {self._value!r} instead of failing")
        return self._error


def run_in_thread(fn: Callable[[], T]) -> Background[T]:
    """Run a (blocking) call in the background, e.g. a session waiting on pg_advisory_lock(42)."""
    return Background(fn)


def queue_on_lock(conn: psycopg.Connection[Any], key: int) -> Background[None]:
    """A worker queueing on advisory lock ``key``: it waits in the background,
    and releases the lock as soon as it gets it, so a convoy drains on its own."""

    def take_and_release() -> None:
        conn.execute("SELECT pg_advisory_lock(%s)", (key,))
        conn.execute("SELECT pg_advisory_unlock(%s)", (key,))

    return Background(take_and_release)


class PgDatabase:
    """A fresh database on a test server, dropped with all its sessions at teardown."""

    def __init__(self, server: LocalCluster) -> None:
        self.server = server
        self.major_version = server.major_version
        self.database = "t_" + uuid.uuid4().hex[:16]
        self.admin_dsn = server.dsn(dbname=self.database)
        self.monitor_user = MONITOR_USER
        self.monitor_dsn = server.dsn(
            dbname=self.database, user=MONITOR_USER, password=MONITOR_PASSWORD
        )
        self._connections: list[psycopg.Connection[tuple[Any, ...]]] = []
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.database)))

    def connect(
        self, application_name: str = "test-client", autocommit: bool = True
    ) -> psycopg.Connection[tuple[Any, ...]]:
        """A superuser session on the test database, closed at teardown."""
        conn = psycopg.connect(
            self.admin_dsn, application_name=application_name, autocommit=autocommit
        )
        self._connections.append(conn)
        return conn

    def close(self) -> None:
        # FORCE terminates the sessions first, which also frees threads blocked in them.
        if self.server.running:
            with psycopg.connect(self.server.dsn(), autocommit=True) as admin:
                admin.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                        sql.Identifier(self.database)
                    )
                )
        for conn in self._connections:
            conn.close()
        self._connections.clear()

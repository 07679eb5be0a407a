"""The lock-manager waits a monitor's poll causes: pg_stat_activity sampled
every few milliseconds while pgbench runs, each sample saying how many of
pgbench's sessions waited on ``LWLock:LockManager`` (the partition locks that
``pg_lock_status()`` holds while it copies the lock table) and whether a
monitor's statement was running at that moment. Waits in samples taken while
a monitor's statement ran are the poll's; the rest are pgbench's own."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import psycopg

from bench.pgbench import CLIENTS_APPLICATION
from bench.server import BenchServer

EVERY = 0.01  # seconds between samples
SAMPLE = """
SELECT pg_catalog.count(*) FILTER (
           WHERE a.application_name = %(clients)s AND a.wait_event_type = 'LWLock'
             AND a.wait_event IN ('LockManager', 'lock_manager')),
       pg_catalog.count(*) FILTER (
           WHERE a.usename = ANY (%(monitors)s) AND a.state = 'active'
             AND a.pid <> pg_catalog.pg_backend_pid())
FROM pg_catalog.pg_stat_activity AS a
"""


@dataclass(frozen=True, slots=True)
class LockWaits:
    """pgbench's sessions waiting on the lock manager over one window, as
    session-milliseconds per second of the window: all of them, and those in
    samples taken while a monitor's statement ran."""

    samples: int
    waiting_ms_per_s: float
    during_polls_ms_per_s: float
    poll_samples: int  # samples taken while a monitor's statement ran

    @property
    def caused_ms_per_s(self) -> float:
        """The waits during polls beyond what pgbench waits on its own at
        other moments of the same window."""
        outside = self.samples - self.poll_samples
        if not self.poll_samples or not outside:
            return self.during_polls_ms_per_s
        background = (self.waiting_ms_per_s - self.during_polls_ms_per_s) / outside
        return max(0.0, self.during_polls_ms_per_s - background * self.poll_samples)


class WaitSampler:
    """A thread sampling pg_stat_activity on a connection of its own; use as a
    context manager, and ask ``between(start, end)`` for a window (monotonic)."""

    def __init__(self, server: BenchServer, monitors: Sequence[str], every: float = EVERY) -> None:
        self._dsn = server.dsn(application_name="bench-wait-sampler")
        self._params: dict[str, Any] = {"clients": CLIENTS_APPLICATION, "monitors": list(monitors)}
        self._every = every
        self._samples: list[tuple[float, int, bool]] = []  # at, waiting, during a poll
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wait-sampler", daemon=True)
        self._error: BaseException | None = None

    def __enter__(self) -> WaitSampler:
        self._conn = psycopg.connect(self._dsn, autocommit=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        self._conn.close()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                row = self._conn.execute(SAMPLE, self._params, prepare=True).fetchone()
                if row is not None:
                    with self._lock:
                        self._samples.append((started, int(row[0]), int(row[1]) > 0))
                self._stop.wait(max(0.0, self._every - (time.monotonic() - started)))
        except BaseException as exc:  # told by between(), in the measuring thread
            self._error = exc

    def between(self, start: float, end: float) -> LockWaits:
        if self._error is not None:
            raise RuntimeError(f"the wait sampler failed: {self._error}") from self._error
        with self._lock:  # windows come in order: what is before this one is done with
            self._samples = [s for s in self._samples if s[0] >= start]
            window = [s for s in self._samples if s[0] < end]
        waited = during = 0.0
        for (at, waiting, in_poll), (following, _, _) in zip(
            window, [*window[1:], (end, 0, False)], strict=True
        ):
            # Each sample stands for the time until the next one.
            weight = waiting * (following - at)
            waited += weight
            during += weight if in_poll else 0.0
        seconds = max(end - start, 1e-9)
        return LockWaits(
            samples=len(window),
            waiting_ms_per_s=waited * 1000 / seconds,
            during_polls_ms_per_s=during * 1000 / seconds,
            poll_samples=sum(1 for s in window if s[2]),
        )

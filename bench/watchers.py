"""The monitors of the observer-effect benchmark (bench/impact.py), each an
arm: started once per server, switched on for its arm's window only, and
asked for its CPU.

- ``lockwatch run`` polling every 1 s, and another every 10 s: stopped with
  SIGSTOP outside their arms (a stopped process does nothing; at SIGCONT the
  poll it missed runs at once, then it keeps its own schedule).
- postgres_exporter, scraped every 1 s by a thread here while its arm runs
  (it does nothing between scrapes).
- The floor: ``SELECT count(*) FROM pg_locks`` (the ``pg_lock_status()`` copy
  every reader of ``pg_locks`` pays, and nothing else) replayed every 1 s by
  pgbench as a client of its own; and, on request, lockwatch's own two
  statements replayed the same way: its SQL without its process.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Protocol

import psycopg

from bench.daemon import LockwatchProcess, cpu_seconds, target_config
from bench.exporter import PostgresExporter
from bench.pgbench import Replay
from bench.poll_cost import COUNT_SQL
from bench.server import EXPORTER_ROLE, FLOOR_ROLE, LOCKWATCH_ROLE, PARTS_ROLE, BenchServer
from lockwatch.sample.activity import QUERY_CHARS
from lockwatch.sample.locks import advisory_locks_query, lock_sessions_query

NONE = "none"
LOCKWATCH = "lockwatch 1 s"
LOCKWATCH_SLOW = "lockwatch 10 s"
EXPORTER = "postgres_exporter 1 s"
FLOOR = "the floor 1 s"
LOCKWATCH_SQL = "lockwatch's SQL 1 s"
LOCKWATCH_NICE = "lockwatch 1 s nice 10"
ARMS = (NONE, LOCKWATCH, LOCKWATCH_SLOW, EXPORTER, FLOOR)
# Arms that tell where lockwatch's cost comes from, on request: its SQL with
# no process of its own, and its process at a lower CPU priority.
EVERY_ARM = (*ARMS, LOCKWATCH_SQL, LOCKWATCH_NICE)
NICE = 10
INTERVAL = 1.0
SLOW_INTERVAL = 10.0
# Whose statements are a monitor's, in pg_stat_activity and pg_stat_statements
# (lockwatch's SQL replayed runs as a role of its own).
ROLES = {
    LOCKWATCH: LOCKWATCH_ROLE,
    LOCKWATCH_SLOW: LOCKWATCH_ROLE,
    LOCKWATCH_NICE: LOCKWATCH_ROLE,
    EXPORTER: EXPORTER_ROLE,
    FLOOR: FLOOR_ROLE,
    LOCKWATCH_SQL: PARTS_ROLE,
}


class Watcher(Protocol):
    """One arm's monitor."""

    def on(self) -> None: ...

    def off(self) -> None: ...

    def cpu(self) -> float:
        """Its CPU seconds so far (valid while on)."""
        ...

    def refresh(self) -> None:
        """Catch up with a change of the locks held, outside any window."""
        ...


class Nobody:
    """The arm with no monitor."""

    def on(self) -> None:
        pass

    def off(self) -> None:
        pass

    def cpu(self) -> float:
        return 0.0

    def refresh(self) -> None:
        pass


class Paused:
    """A ``lockwatch run`` that runs only while its arm does."""

    def __init__(self, daemon: LockwatchProcess) -> None:
        self.daemon = daemon
        daemon.wait_for_polls(1)
        self._signal(signal.SIGSTOP)

    def _signal(self, sent: signal.Signals) -> None:
        self.daemon.psutil.send_signal(sent)

    def on(self) -> None:
        self._signal(signal.SIGCONT)

    def off(self) -> None:
        self.daemon.check_alive()
        self._signal(signal.SIGSTOP)

    def cpu(self) -> float:
        return cpu_seconds(self.daemon)

    def refresh(self) -> None:
        """Two polls of the new locks (the first sees every lock anew)."""
        self.on()
        try:
            self.daemon.wait_for_polls(self.daemon.polls() + 2)
        finally:
            self.off()


class Scraped:
    """postgres_exporter, scraped every ``every`` seconds while on."""

    def __init__(self, exporter: PostgresExporter, every: float) -> None:
        self.exporter = exporter
        self.every = every
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.exporter.scrape()

    def on(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="scraper", daemon=True)
        self._thread.start()

    def off(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def cpu(self) -> float:
        return cpu_seconds(self.exporter)

    def refresh(self) -> None:
        self.exporter.scrape()


class Replayed:
    """A statement replayed by pgbench every ``every`` seconds while on; what
    it replays is made again by ``statement`` at each refresh."""

    def __init__(
        self,
        server: BenchServer,
        arm: str,
        statement: Callable[[BenchServer], str],
        workdir: Path,
    ) -> None:
        self._server, self._arm, self._statement, self._workdir = server, arm, statement, workdir
        self._text = statement(server)
        self._process: Replay | None = None

    def on(self) -> None:
        name = "floor" if self._arm == FLOOR else "lockwatch-sql"
        self._process = Replay(
            self._server, ROLES[self._arm], self._text, INTERVAL, self._workdir, f"bench-{name}"
        )
        self._process.start()

    def off(self) -> None:
        """Stopped; and if it ended by itself (its statement failed), said why."""
        process, self._process = self._process, None
        if process is not None:
            try:
                process.check_alive()
            finally:
                process.stop()

    def cpu(self) -> float:
        return 0.0 if self._process is None else cpu_seconds(self._process)

    def refresh(self) -> None:
        self._text = self._statement(self._server)


def lockwatch_sql(server: BenchServer) -> str:
    """lockwatch's two statements of a quiet poll, as pgbench replays them:
    the sessions' pids (the holders' now) written into the second."""
    with psycopg.connect(server.dsn()) as conn:
        version = conn.info.server_version
        row = conn.execute(
            "SELECT coalesce(array_agg(DISTINCT pid), '{}') FROM pg_catalog.pg_locks"
            " WHERE locktype = 'advisory'"
        ).fetchone()
        pids = list(row[0]) if row else []
        sessions = lock_sessions_query(version).replace(b")b", b")s")
        rendered = psycopg.ClientCursor(conn).mogrify(
            sessions.decode(), {"pids": pids, "query_chars": QUERY_CHARS}
        )
    return f"{advisory_locks_query(version).decode().strip()};\n{rendered.strip()}"


def floor_sql(server: BenchServer) -> str:
    return COUNT_SQL


@contextmanager
def watchers(
    server: BenchServer,
    arms: tuple[str, ...],
    workdir: Path,
    exporter: PostgresExporter | None = None,
) -> Iterator[dict[str, Watcher]]:
    """A watcher for each of ``arms`` on ``server``, all off, stopped at the end."""
    found: dict[str, Watcher] = {}
    with ExitStack() as stack:
        for arm in arms:
            if arm == NONE:
                found[arm] = Nobody()
            elif arm in (LOCKWATCH, LOCKWATCH_SLOW, LOCKWATCH_NICE):
                every = SLOW_INTERVAL if arm == LOCKWATCH_SLOW else INTERVAL
                target = target_config("bench", server.dsn(LOCKWATCH_ROLE), every)
                nice = NICE if arm == LOCKWATCH_NICE else 0
                name = f"impact-lockwatch-{every:g}s-nice{nice}"
                daemon = LockwatchProcess([target], workdir, name, nice=nice)
                stack.enter_context(daemon)
                stack.callback(daemon.psutil.send_signal, signal.SIGCONT)
                found[arm] = Paused(daemon)
            elif arm == EXPORTER:
                exporter = exporter or stack.enter_context(PostgresExporter(server, workdir))
                found[arm] = Scraped(exporter, INTERVAL)
            else:
                statement = floor_sql if arm == FLOOR else lockwatch_sql
                found[arm] = Replayed(server, arm, statement, workdir)
                stack.callback(found[arm].off)
        yield found

"""Where pinged job runs are kept: SQLite in the state dir by default, or a
PostgreSQL table that several lockwatch instances can share.

Both speak the same SQL through one class; only the connection and the
placeholder style differ.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from lockwatch.model.jobs import JobRun, RunStatus
from lockwatch.state.pgstore import StoreConnection, StoreError

RETENTION = timedelta(days=30)


@dataclass(frozen=True, slots=True)
class PingEvent:
    """One ping: a run starting, or finishing with success or failure."""

    job: str
    event: str  # start, success or fail
    at: datetime
    run_id: str | None = None
    run_key: str | None = None
    host: str | None = None
    exit_code: int | None = None
    duration: float | None = None  # seconds, when a finish ping comes without a start
    source: str = "ping"
    pid: int | None = None  # the run's process on its host (lockwatch exec says it)


class JobStore(ABC):
    """Records pings as runs and answers which runs a job had."""

    _lock: threading.Lock

    @abstractmethod
    def _run(self, query: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]: ...

    @abstractmethod
    def _timestamp(self, moment: datetime) -> Any: ...

    @abstractmethod
    def _moment(self, stored: Any) -> datetime: ...

    @abstractmethod
    def close(self) -> None: ...

    def record(self, ping: PingEvent) -> JobRun:
        with self._lock:
            if ping.event == "start":
                return self._start(ping)
            return self._finish(ping)

    def _start(self, ping: PingEvent) -> JobRun:
        run = JobRun(
            job=ping.job,
            run_key=ping.run_key,
            started_at=ping.at,
            host=ping.host,
            source=ping.source,
            run_id=ping.run_id or uuid.uuid4().hex,
            pid=ping.pid,
        )
        self._run(
            "INSERT INTO {table} (job, run_id, run_key, host, source, started_at, finished_at, status, exit_code, pid) VALUES (%(job)s, %(run_id)s, %(run_key)s,"
            " %(host)s, %(source)s, %(started_at)s, NULL, 'running', NULL, %(pid)s)"
            # A start that arrives after its own finish (pings race) changes nothing.
            " ON CONFLICT (job, run_id) DO NOTHING",
            {
                "job": run.job,
                "run_id": run.run_id,
                "run_key": run.run_key,
                "host": run.host,
                "source": run.source,
                "started_at": self._timestamp(run.started_at),
                "pid": run.pid,
            },
        )
        self._forget_before(ping.at - RETENTION)
        return run

    def _finish(self, ping: PingEvent) -> JobRun:
        status = RunStatus.SUCCESS if ping.event == "success" else RunStatus.FAIL
        # The run this finish belongs to: by run id, else the latest run of the
        # job still going on that host.
        rows = self._run(
            "SELECT job, run_id, run_key, host, source, started_at, finished_at, status, exit_code, pid FROM {table} WHERE job = %(job)s AND status = 'running'"
            " AND (run_id = %(run_id)s OR (CAST(%(run_id)s AS TEXT) IS NULL"
            " AND (host = %(host)s OR CAST(%(host)s AS TEXT) IS NULL)))"
            " ORDER BY started_at DESC LIMIT 1",
            {"job": ping.job, "run_id": ping.run_id, "host": ping.host},
        )
        if not rows:
            # A finish without a start (the start ping was lost): record the run whole.
            started = ping.at - timedelta(seconds=ping.duration or 0)
            started_run = self._start(
                PingEvent(
                    ping.job,
                    "start",
                    started,
                    ping.run_id,
                    ping.run_key,
                    ping.host,
                    source=ping.source,
                    pid=ping.pid,
                )
            )
            run_id = started_run.run_id
        else:
            run_id = rows[0][1]
        self._run(
            "UPDATE {table} SET finished_at = %(at)s, status = %(status)s, exit_code = %(exit_code)s"
            " WHERE job = %(job)s AND run_id = %(run_id)s",
            {
                "at": self._timestamp(ping.at),
                "status": status.value,
                "exit_code": ping.exit_code,
                "job": ping.job,
                "run_id": run_id,
            },
        )
        finished = self.runs(ping.job, datetime.min.replace(tzinfo=UTC), run_id=run_id)
        return finished[0]

    def runs(self, job: str, since: datetime, *, run_id: str | None = None) -> list[JobRun]:
        rows = self._run(
            "SELECT job, run_id, run_key, host, source, started_at, finished_at, status, exit_code, pid FROM {table} WHERE job = %(job)s"
            " AND started_at >= %(since)s"
            " AND (CAST(%(run_id)s AS TEXT) IS NULL OR run_id = %(run_id)s) ORDER BY started_at",
            {"job": job, "since": self._timestamp(since), "run_id": run_id},
        )
        return [self._to_run(row) for row in rows]

    def _to_run(self, row: Sequence[Any]) -> JobRun:
        job, run_id, run_key, host, source, started_at, finished_at, status, exit_code, pid = row
        return JobRun(
            job=job,
            run_key=run_key,
            started_at=self._moment(started_at),
            finished_at=None if finished_at is None else self._moment(finished_at),
            status=RunStatus(status),
            host=host,
            source=source,
            run_id=run_id,
            exit_code=exit_code,
            pid=pid,
        )

    def _forget_before(self, moment: datetime) -> None:
        self._run(
            "DELETE FROM {table} WHERE started_at < %(before)s", {"before": self._timestamp(moment)}
        )


_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS {table} ("
    " job TEXT NOT NULL, run_id TEXT NOT NULL, run_key TEXT, host TEXT, source TEXT NOT NULL,"
    " started_at {time} NOT NULL, finished_at {time}, status TEXT NOT NULL, exit_code INTEGER,"
    " pid INTEGER, PRIMARY KEY (job, run_id))"
)
# A store made before runs had a pid gets the column (NULL for its old runs).
_ADD_PID = "ALTER TABLE {table} ADD COLUMN pid INTEGER"
_INDEX = "CREATE INDEX IF NOT EXISTS {index} ON {table} (job, started_at)"
_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


class SqliteJobStore(JobStore):
    """Opened at first use, so a state dir that cannot be written costs the
    pings (503) and the pinged jobs (a failing source), never the daemon."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        for statement in (_SCHEMA.replace("{time}", "TEXT"), _INDEX):
            db.execute(
                statement.replace("{table}", "job_runs").replace("{index}", "job_runs_started")
            )
        if "pid" not in {row[1] for row in db.execute("PRAGMA table_info(job_runs)")}:
            db.execute(_ADD_PID.replace("{table}", "job_runs"))
        return db

    def _run(self, query: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        text = _PLACEHOLDER.sub(r":\1", query.replace("{table}", "job_runs"))
        try:
            if self._db is None:
                self._db = self._open()
            return list(self._db.execute(text, dict(params)).fetchall())
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"job store {self.path}: {exc}") from None

    def _timestamp(self, moment: datetime) -> str:
        # ISO text in UTC sorts like time, which the queries rely on.
        return moment.astimezone(UTC).isoformat()

    def _moment(self, stored: Any) -> datetime:
        return datetime.fromisoformat(str(stored))

    def close(self) -> None:
        if self._db is not None:
            self._db.close()


class PostgresJobStore(JobStore):
    """A table in a database lockwatch may write to — never a monitored one
    unless the operator says so: monitoring itself stays read-only."""

    def __init__(self, dsn: str, table: str = "lockwatch_job_runs") -> None:
        self._lock = threading.Lock()
        self._store = StoreConnection(
            dsn,
            "job store",
            {"table": table, "index": f"{table}_started"},
            (
                _SCHEMA.replace("{time}", "timestamptz"),
                _INDEX,
                _ADD_PID.replace("ADD COLUMN", "ADD COLUMN IF NOT EXISTS"),
            ),
        )

    def _run(self, query: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        return self._store.run(query, params)

    def _timestamp(self, moment: datetime) -> datetime:
        return moment

    def _moment(self, stored: Any) -> datetime:
        return stored if isinstance(stored, datetime) else datetime.fromisoformat(str(stored))

    def close(self) -> None:
        self._store.close()

"""Seed 000 end to end: a nightly job runs twice because its leader lock went
through pgbouncer in transaction mode. A real ``lockwatch run`` reports the
duplicate start (from the application's table, or from ``lockwatch exec``
pings) and the pooled session lock that caused it; the direct DSN fixes it."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.fixtures.paths import WORKLOADS
from tests.fixtures.pgbouncer import STATS_USER, PgBouncer
from tests.fixtures.postgres import PgDatabase, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config

pytestmark = [pytest.mark.pg, pytest.mark.slow]

SCHEDULER = WORKLOADS / "nightly_scheduler.py"
REPORT_DATE = "2026-11-29"
PING_TOKEN = "seed000-ping-token-4e1b7c"
RUNS_QUERY = (
    "SELECT report_date::text AS run_key, started_at, host FROM report_runs"
    " WHERE started_at >= %(since)s"
)


@pytest.fixture
def app_database(pg: PgDatabase) -> PgDatabase:
    """The application's table of runs, readable by lockwatch's pg_monitor role
    (an application table needs its own GRANT SELECT)."""
    with psycopg.connect(pg.server.dsn(), autocommit=True) as admin:
        for role in ("scheduler", STATS_USER):
            if not admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    with psycopg.connect(pg.admin_dsn, autocommit=True) as admin:
        admin.execute(
            "CREATE TABLE report_runs (report_date date, host text, started_at timestamptz)"
        )
        admin.execute("GRANT INSERT ON report_runs TO scheduler")
        admin.execute(
            sql.SQL("GRANT SELECT ON report_runs TO {}").format(sql.Identifier(pg.monitor_user))
        )
    return pg


@pytest.fixture
def bouncer(app_database: PgDatabase) -> Iterator[PgBouncer]:
    with PgBouncer(app_database.server, pool_mode="transaction", pool_size=2) as running:
        yield running


def run_scheduler(dsn: str, host: str) -> str:
    done = subprocess.run(
        [sys.executable, str(SCHEDULER), dsn, host, REPORT_DATE],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def start_lockwatch(
    tmp_path: Path, pg: PgDatabase, target_extra: str, top_extra: str
) -> LockwatchProcess:
    port = free_port()
    config = write_config(tmp_path, port, {"main": pg.monitor_dsn}, extra={"main": target_extra})
    config.write_text(config.read_text() + top_extra)
    process = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    process.start()
    return process


def sql_job() -> str:
    return (
        "jobs:\n"
        "  - name: nightly-report\n"
        f'    query: "{RUNS_QUERY}"\n'
        "    schedule: {cron: '0 3 * * *', timezone: Europe/Berlin, grace: 10m}\n"
    )


def job_finding(lockwatch: LockwatchProcess, kind: str) -> dict[str, Any] | None:
    return next(
        (f for f in lockwatch.findings() if f["kind"] == kind and f["subject"].get("job")), None
    )


def test_both_schedulers_lead_through_pgbouncer_and_lockwatch_reports_the_duplicate_and_the_cause(
    tmp_path: Path, app_database: PgDatabase, bouncer: PgBouncer
) -> None:
    lockwatch = start_lockwatch(
        tmp_path, app_database, f"pgbouncer: {{dsn: '{bouncer.admin_dsn()}'}}", sql_job()
    )
    try:
        via_pooler = bouncer.dsn(app_database.database, user="scheduler")
        assert run_scheduler(via_pooler, "app-1") == "leader"
        assert run_scheduler(via_pooler, "app-2") == "leader", "the seed's bug: both lead"
        second_start = time.monotonic()

        duplicate = wait_until(
            lambda: job_finding(lockwatch, "job_duplicate_start"),
            message="duplicate start reported",
        )
        print(
            f"\njob_duplicate_start reported {time.monotonic() - second_start:.2f}s after the second start"
        )
        assert duplicate["subject"]["job"] == "nightly-report"
        assert duplicate["evidence"]["run_key"] == REPORT_DATE
        assert sorted(start["host"] for start in duplicate["evidence"]["starts"]) == [
            "app-1",
            "app-2",
        ]
        assert (
            lockwatch.metric("lockwatch_job_starts_total", target="main", job_name="nightly-report")
            == 2
        )
        assert (
            lockwatch.metric(
                "lockwatch_job_duplicate_starts_total", target="main", job_name="nightly-report"
            )
            == 1
        )

        pooled = wait_until(
            lambda: lockwatch.finding("lock_pooled_session", "main"),
            message="pooled session lock reported",
        )
        assert pooled["subject"]["lock"].startswith("pid ")  # the pooled backend holding it
        assert pooled["evidence"]["key"] == "4242"
        assert pooled["evidence"]["pool"]["pool_mode"] == "transaction"
        assert pooled["evidence"]["pool"]["user"] == "scheduler"
        assert lockwatch.metric("lockwatch_source_up", target="main", source="pgbouncer") == 1
    finally:
        assert lockwatch.stop() == 0, lockwatch.log(whole=True)


def test_lockwatch_exec_pings_report_the_duplicate_without_reading_the_application(
    tmp_path: Path, app_database: PgDatabase, bouncer: PgBouncer
) -> None:
    pings = (
        "pings: {token: '${LOCKWATCH_PING_TOKEN}'}\n"
        "jobs:\n"
        "  - name: nightly-report\n"
        "    schedule: {cron: '0 3 * * *', timezone: Europe/Berlin}\n"
    )
    port = free_port()
    config = write_config(tmp_path, port, {"main": app_database.monitor_dsn})
    config.write_text(config.read_text() + pings)
    lockwatch = LockwatchProcess(
        config, tmp_path / "lockwatch.log", port, env={"LOCKWATCH_PING_TOKEN": PING_TOKEN}
    )
    lockwatch.start()
    try:
        via_pooler = bouncer.dsn(app_database.database, user="scheduler")
        for host in ("app-1", "app-2"):
            wrapped = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "lockwatch",
                    "exec",
                    "--job",
                    "nightly-report",
                    "--run-key",
                    REPORT_DATE,
                    "--host",
                    host,
                    "--url",
                    lockwatch.base,
                    "--",
                    sys.executable,
                    str(SCHEDULER),
                    via_pooler,
                    host,
                    REPORT_DATE,
                ],
                env={"LOCKWATCH_PING_TOKEN": PING_TOKEN, "PATH": "/usr/bin:/bin"},
                check=False,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert wrapped.returncode == 0, wrapped.stderr
            assert wrapped.stdout.strip() == "leader"
        duplicate = wait_until(
            lambda: job_finding(lockwatch, "job_duplicate_start"),
            message="duplicate start from pings",
        )
        assert {start["source"] for start in duplicate["evidence"]["starts"]} == {"ping"}

        def both_finished() -> bool:
            finding = job_finding(lockwatch, "job_duplicate_start")
            return finding is not None and all(
                start["status"] == "success" for start in finding["evidence"]["starts"]
            )

        # A poll may have seen the second start before its success ping: the
        # evidence follows the runs from poll to poll.
        wait_until(both_finished, message="both pinged runs finished in the evidence")
        assert PING_TOKEN not in lockwatch.log(whole=True)
    finally:
        assert lockwatch.stop() == 0, lockwatch.log(whole=True)


def test_the_fix_a_direct_dsn_gives_one_leader_and_no_duplicate(
    tmp_path: Path, app_database: PgDatabase
) -> None:
    lockwatch = start_lockwatch(tmp_path, app_database, "", sql_job())
    try:
        assert run_scheduler(app_database.admin_dsn, "app-1") == "leader"
        # app-1's process has exited, so its session lock is gone: app-2 leads the
        # next night only. Same night, app-1 still running: hold the lock open.
        with psycopg.connect(app_database.admin_dsn, autocommit=True) as still_running:
            still_running.execute("SELECT pg_advisory_lock(4242)")
            assert run_scheduler(app_database.admin_dsn, "app-2") == "not a leader"
            lockwatch.wait_polls(4)  # lockwatch polls the runs a few times
        assert (
            lockwatch.metric("lockwatch_job_starts_total", target="main", job_name="nightly-report")
            == 1
        )
        assert job_finding(lockwatch, "job_duplicate_start") is None
    finally:
        assert lockwatch.stop() == 0, lockwatch.log(whole=True)

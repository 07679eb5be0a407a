"""Hostile names in the log, and a holder whose activity the server does not
track: every log line stays one line whatever a database name holds, the
untracked holder is said to be untracked, and ``doctor`` warns about it."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from lockwatch.demo.pgcluster import LocalCluster
from lockwatch.text import escaped_breaks
from tests.battery.conftest import Record
from tests.fixtures.evidence import lock_of
from tests.fixtures.postgres import PgDatabase, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config

pytestmark = [pytest.mark.pg]

# A database name that would forge a log line of its own, and hide a break
# where str.splitlines() and log viewers see one.
HOSTILE_DATABASE = "app\n2026-01-01T00:00:00.000Z INFO lockwatch: all clear\u2028x\x85y"
TRACKED_KEY, UNTRACKED_KEY = 42, 43
OVER_BUDGET = "{max_hold: 1s, orphan_after: 1h}"
EVENT = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")
UNTRACKED_TEXT = "not tracked: track_activities is off"


@pytest.fixture
def hostile_database(battery_cluster: LocalCluster) -> Iterator[str]:
    with psycopg.connect(battery_cluster.dsn(), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(HOSTILE_DATABASE)))
    try:
        yield make_conninfo(battery_cluster.dsn(), dbname=HOSTILE_DATABASE)
    finally:
        with psycopg.connect(battery_cluster.dsn(), autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(HOSTILE_DATABASE))
            )


def hold(dsn: str, key: int, *, tracked: bool) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn, autocommit=True, application_name=f"holder-{key}")
    if not tracked:
        conn.execute("SET track_activities = off")  # a superuser may, for its own session
    conn.execute("SELECT pg_advisory_lock(%s)", (key,))
    return conn


def summary_of(lockwatch: LockwatchProcess, key: int) -> str | None:
    for finding in lockwatch.findings():
        if finding["kind"] == "lock_held_too_long" and lock_of(finding) == str(key):
            return str(finding["summary"])
    return None


def test_hostile_names_keep_log_lines_whole_and_an_untracked_holder_is_said_so(
    hostile_database: str, battery_db: PgDatabase, tmp_path: Any, battery: Record
) -> None:
    tracked = hold(hostile_database, TRACKED_KEY, tracked=True)
    untracked = hold(hostile_database, UNTRACKED_KEY, tracked=False)
    port = free_port()
    config = write_config(tmp_path, port, {"main": battery_db.monitor_dsn}, locks=OVER_BUDGET)
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    try:
        lockwatch.start()
        untracked_summary = wait_until(
            lambda: summary_of(lockwatch, UNTRACKED_KEY), message="the untracked holder's finding"
        )
        tracked_summary = wait_until(lambda: summary_of(lockwatch, TRACKED_KEY))
        wait_until(lambda: lockwatch.log().count("firing") >= 2, message="both logged")
        doctor = subprocess.run(
            [sys.executable, "-m", "lockwatch", "doctor", "--dsn", battery_db.monitor_dsn],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        stopped = lockwatch.stop() if lockwatch.proc is not None else 0
        tracked.close()
        untracked.close()
    assert stopped == 0, lockwatch.log(whole=True)
    log = lockwatch.log(whole=True)
    lines = log.splitlines()

    strays = [line for line in lines if not EVENT.match(line)]
    assert not strays, strays
    firing = [line for line in lines if "firing" in line]
    assert len(firing) == 2, firing
    assert all(escaped_breaks(HOSTILE_DATABASE) in line for line in firing), firing
    assert UNTRACKED_TEXT in untracked_summary, untracked_summary
    assert UNTRACKED_TEXT not in tracked_summary, tracked_summary
    assert "1 session(s) run with track_activities off" in doctor.stdout, doctor
    battery(
        "untracked-activity",
        injected=(
            "a database named with a newline, a forged log line, U+2028 and NEL; in it one "
            "holder as usual and one with SET track_activities = off, both past max_hold"
        ),
        did=(
            f"{len(lines)} log lines, each one event; the database spelt "
            f"{escaped_breaks(HOSTILE_DATABASE)[:24]}…; the untracked holder: "
            f"'{untracked_summary.split(', ', 1)[-1]}'; doctor: "
            f"'{next(x for x in doctor.stdout.splitlines() if 'track_activities' in x).strip()}'"
        ),
        intact=f"yes: no stray line in the log; doctor exited {doctor.returncode}",
    )

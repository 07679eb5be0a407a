"""The shared store of resolved incidents, reached through a role without the
rights on its table: it said nothing, kept everything in memory and lost it
at restart, while check-config said ok."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.battery.conftest import Record
from tests.fixtures.postgres import PgDatabase, free_port
from tests.fixtures.processes import LockwatchProcess, write_config

pytestmark = [pytest.mark.pg, pytest.mark.slow]

READER = "lockwatch_history_reader"
READER_PASSWORD = "history-reader-pw"  # a throwaway role on a test server
TABLE = "lockwatch_incidents"  # lockwatch.state.incident_history.TABLE


def test_a_history_store_without_rights_is_said_at_start_in_check_config_and_a_metric(
    tmp_path: Path, battery_db: PgDatabase, battery: Record
) -> None:
    server = battery_db.server
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(READER)))
    server.create_password_role(READER, READER_PASSWORD)
    with psycopg.connect(battery_db.admin_dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL(
                "CREATE TABLE {} (id text PRIMARY KEY, target text NOT NULL, "
                "resolved_at timestamptz NOT NULL, document jsonb NOT NULL)"
            ).format(sql.Identifier(TABLE))
        )
        admin.execute(
            sql.SQL("GRANT SELECT ON {} TO {}").format(
                sql.Identifier(TABLE), sql.Identifier(READER)
            )
        )
    store = server.dsn(dbname=battery_db.database, user=READER, password=READER_PASSWORD)
    port = free_port()
    config = write_config(tmp_path, port, {"main": battery_db.monitor_dsn})
    with config.open("a") as extra:
        extra.write(f"pings: {{store: postgres, dsn: '{store}'}}\nincidents: {{history: pings}}\n")
    checked = subprocess.run(
        [sys.executable, "-m", "lockwatch", "check-config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    lockwatch.start()
    try:
        # checked before lockwatch listens: down from the first scrape
        up = lockwatch.metric("lockwatch_history_store_up", store="postgres")
        log = lockwatch.log()
    finally:
        lockwatch.stop()
    said = [line for line in log.splitlines() if "lost at the next restart" in line]
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "lacks INSERT, UPDATE, DELETE" in checked.stderr, checked.stderr
    assert up == 0
    assert len(said) == 1 and "lacks INSERT, UPDATE, DELETE" in said[0], log
    assert READER_PASSWORD not in log + checked.stdout + checked.stderr
    battery(
        "history-rights",
        injected=(
            "incidents: {history: pings} with a store role granted only SELECT on "
            f"{TABLE} (no INSERT, UPDATE, DELETE)"
        ),
        did=(
            f"check-config exit {checked.returncode} ('{checked.stderr.split('problem: ')[-1][:70]}…'); "
            "at start one ERROR line saying what will be lost; lockwatch_history_store_up 0"
        ),
        intact="yes: the loss is said before it happens; no password in any output",
    )

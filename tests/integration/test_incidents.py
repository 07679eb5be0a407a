"""Incidents on a real server through a real ``lockwatch run``: one psql-like
session holding 4,001 advisory locks is one incident, it keeps its id and
timeline across a restart, and once resolved it is in ``/api/v1/incidents``
and ``lockwatch incidents`` with its timeline and impact."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.fixtures.paths import ROOT
from tests.fixtures.postgres import PgDatabase, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config
from tests.fixtures.schema import assert_valid_incidents

pytestmark = [pytest.mark.pg, pytest.mark.slow]

LOCKS = 4001


def incidents(lockwatch: LockwatchProcess, **params: str) -> list[dict[str, Any]]:
    response = requests.get(f"{lockwatch.base}/api/v1/incidents", params=params, timeout=5)
    response.raise_for_status()
    document = response.json()
    assert_valid_incidents(document)
    return list(document["incidents"])


def the_open_one(lockwatch: LockwatchProcess, pid: int) -> dict[str, Any] | None:
    """The open incident of ``pid`` once it counts every lock, alone among the open ones."""
    found = incidents(lockwatch, state="open", target="main")
    if len(found) == 1 and (found[0]["root"]["pid"], found[0]["impact"]["locks_held"]) == (
        pid,
        LOCKS,
    ):
        return found[0]
    return None


def lockwatch_incidents(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lockwatch", "incidents", "-c", str(config), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )


@pytest.mark.parametrize("pg_server", ["pg18"], indirect=True)
def test_a_session_holding_4001_locks_is_one_incident_that_outlives_a_restart(
    pg: PgDatabase, tmp_path: Path
) -> None:
    port = free_port()
    config = write_config(
        tmp_path,
        port,
        {"main": pg.monitor_dsn},
        locks="{max_hold: 1s, orphan_after: 2s, convoy_waiters: 2, convoy_wait: 1s}",
    )
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    psql = pg.connect(application_name="psql")
    psql.execute("SELECT pg_advisory_lock(k) FROM generate_series(1, %s) AS k", (LOCKS,))
    pid = psql.info.backend_pid
    lockwatch.start()
    try:
        opened = wait_until(lambda: the_open_one(lockwatch, pid), timeout=60)
        assert opened["title"].startswith(f"pid {pid} psql holds {LOCKS} locks")
        # One finding per kind about the session, counting its locks.
        assert 1 <= opened["finding_count"] <= 2
        one = requests.get(f"{lockwatch.base}/api/v1/incidents/{opened['id']}", timeout=5)
        assert_valid_incidents(one.json())
        every = one.json()["incident"]["findings"]
        assert len(every) == opened["finding_count"]
        assert all(f["subject"]["lock"].startswith(f"pid {pid} started ") for f in every)
        assert all(f["evidence"]["held_keys"] == LOCKS for f in every)
        assert len(opened["locks"]) == 5
        assert f"FROM (VALUES ({pid})) AS root (pid)" in opened["next_step"]["sql"]
        findings = lockwatch.findings()
        assert {f["incident"] for f in findings} == {opened["id"]}

        assert lockwatch.stop() == 0
        lockwatch.start()
        again = wait_until(lambda: the_open_one(lockwatch, pid), timeout=60)
        assert again["id"] == opened["id"]
        assert again["opened_at"] == opened["opened_at"]
        assert again["timeline"][: len(opened["timeline"])] == opened["timeline"]

        psql.execute("SELECT pg_advisory_unlock_all()")

        def resolved() -> dict[str, Any] | None:
            done = [i for i in incidents(lockwatch, state="resolved") if i["id"] == opened["id"]]
            return done[0] if done else None

        gone = wait_until(resolved, timeout=30)
        assert gone["resolution"] == "released"
        assert gone["timeline"][-1]["event"] == "resolved"
        assert gone["impact"]["locks_held"] == LOCKS
        by_id = requests.get(f"{lockwatch.base}/api/v1/incidents/{gone['id']}", timeout=5)
        assert by_id.status_code == 200
        assert_valid_incidents(by_id.json())
        assert requests.get(f"{lockwatch.base}/api/v1/incidents/nope", timeout=5).status_code == 404
        refused = requests.get(f"{lockwatch.base}/api/v1/incidents?state=closed", timeout=5)
        assert refused.status_code == 400
        assert "state" in refused.json()["error"]
    finally:
        lockwatch.stop()

    # After the daemon stopped: the postmortem reads the state dir.
    listed = lockwatch_incidents(config, "--json", "--state", "resolved", "--since", "1d")
    assert listed.returncode == 0, listed.stderr
    document = json.loads(listed.stdout)
    assert_valid_incidents(document)
    assert [i["id"] for i in document["incidents"]] == [opened["id"]]
    table = lockwatch_incidents(config)
    assert table.returncode == 0, table.stderr
    assert opened["id"] in table.stdout and "resolved" in table.stdout
    whole = lockwatch_incidents(config, "--id", opened["id"])
    assert whole.returncode == 0, whole.stderr
    assert "next step: end the session of pid" in whole.stdout
    assert "timeline:" in whole.stdout and "resolved" in whole.stdout.split("timeline:")[1]
    assert lockwatch_incidents(config, "--id", "nope").returncode == 1

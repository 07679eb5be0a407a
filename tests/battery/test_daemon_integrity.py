"""lockwatch's own integrity in the big incident: a DSN whose password would be
misread, one state dir shared by two instances, a state file that cannot be
read, the per-kind cap reshuffling, a target removed by SIGHUP."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import psycopg.conninfo
import pytest
import requests

from lockwatch.demo.pgcluster import LocalCluster
from tests.battery.conftest import Record
from tests.fixtures.postgres import MONITOR_USER, PgDatabase, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config

pytestmark = [pytest.mark.pg, pytest.mark.slow]


def lockwatch_command(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lockwatch", *args],
        check=False,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )


def refused_run(config: Path, log: Path) -> tuple[int | None, str]:
    """``lockwatch run`` that should refuse to start: its exit code (None when it
    was still running after a generous wait) and everything it wrote."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lockwatch", "run", "-c", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        try:
            code: int | None = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            code = None
            proc.kill()
            proc.wait(timeout=10)
    return code, log.read_text(errors="replace")


# -- case 14: an unencoded @ in a URI password ---------------------------------


def test_an_unencoded_at_in_a_dsn_password_is_refused_and_short_passwords_garble_nothing(
    tmp_path: Path, battery_cluster: LocalCluster, battery_db: PgDatabase, battery: Record
) -> None:
    host, port = battery_cluster.host, battery_cluster.port
    user = "lw_at_" + uuid.uuid4().hex[:8]
    battery_cluster.create_password_role(user, "Wr@ngPW", "pg_monitor")
    database = battery_db.database
    misread = f"postgresql://{user}:Wr@ngPW@{host}:{port}/{database}"
    encoded = f"postgresql://{user}:Wr%40ngPW@{host}:{port}/{database}"
    short = psycopg.conninfo.make_conninfo(battery_db.monitor_dsn, password="1")

    bad = tmp_path / "bad"
    bad.mkdir()
    config = write_config(bad, free_port(), {"main": misread})
    checked = lockwatch_command("check-config", str(config))
    said = checked.stdout + checked.stderr
    assert checked.returncode != 0, f"check-config accepted the misread DSN: {said}"
    assert "percent-encode the password" in said, said
    assert "ngPW" not in said, said
    code, started = refused_run(config, bad / "lockwatch.log")
    assert code not in (None, 0), f"lockwatch run started on the misread DSN: {started}"
    assert "percent-encode the password" in started, started
    assert "ngPW" not in started, started

    good = tmp_path / "good"
    good.mkdir()
    listen = free_port()
    config = write_config(good, listen, {"main": encoded, "short": short})
    lockwatch = LockwatchProcess(config, good / "lockwatch.log", listen)
    where = f"{MONITOR_USER}@{host}:{port}/{database}"
    try:
        lockwatch.start()
        down = wait_until(
            lambda: lockwatch.finding("target_down", "short"), message="short is down"
        )
        wait_until(lambda: lockwatch.metric("lockwatch_up", target="main") == 1)
        log = lockwatch.log()
        page = requests.get(f"{lockwatch.base}/", timeout=5).text
    finally:
        stopped = lockwatch.stop() if lockwatch.proc is not None else 0
    assert stopped == 0, lockwatch.log(whole=True)
    assert where in down["summary"], f"the short password garbled the message: {down['summary']}"
    assert any(where in line for line in log.splitlines() if "short" in line), log
    for output in (log, page, str(down)):
        assert "ngPW" not in output
    battery(
        "dsn-misread",
        injected=(
            "a URI DSN whose password has an unencoded @ (user:Wr@ngPW@host: libpq reads "
            "password Wr, host ngPW@host); a target whose wrong password is '1'"
        ),
        did=(
            "check-config and lockwatch run refuse the DSN: 'percent-encode the password' "
            f"(exit {checked.returncode} and {code}); the percent-encoded password connects; "
            f"the '1' target's target_down reads '{down['summary'][:90]}…'"
        ),
        intact=(
            "yes: the password's tail in no output (check-config, the log, the API, the page); "
            f"'{where.replace(database, '…')}' shown whole, not garbled by the short password"
        ),
    )

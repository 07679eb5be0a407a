"""``lockwatch run`` as a real process, watched from outside through its HTTP API.

Restarts and kills, of PostgreSQL and of lockwatch, are in tests/battery."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import requests

from lockwatch.demo.scenarios import Blackhole
from tests.fixtures.postgres import (
    MONITOR_PASSWORD,
    PgDatabase,
    free_port,
    queue_on_lock,
    wait_until,
)
from tests.fixtures.processes import LockwatchProcess, write_config

pytestmark = [pytest.mark.pg, pytest.mark.slow]


@pytest.fixture
def lockwatch(tmp_path: Path, pg: PgDatabase) -> Iterator[LockwatchProcess]:
    port = free_port()
    config = write_config(tmp_path, port, {"main": pg.monitor_dsn})
    process = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    yield process
    if process.proc is not None:
        assert process.stop() in (0, -signal.SIGKILL), process.log()


def test_the_daemon_serves_a_convoy_through_its_api_metrics_and_log(
    pg: PgDatabase, lockwatch: LockwatchProcess
) -> None:
    lockwatch.start()
    holder = pg.connect("webhook-worker-1")
    holder.execute("SELECT pg_advisory_lock(42)")
    waiters = [pg.connect(f"webhook-worker-{n}") for n in range(2, 5)]
    blocked = [queue_on_lock(c, 42) for c in waiters]

    convoy = wait_until(
        lambda: lockwatch.finding("lock_convoy", "main"), message="convoy in the API"
    )
    assert convoy["subject"] == {
        "database": pg.database,
        "lock": convoy["subject"]["lock"],  # its holder's session, by pid and start
        "queue": None,
        "job": None,
        "source": None,
    }
    assert convoy["subject"]["lock"].startswith(f"pid {holder.info.backend_pid} started ")
    assert convoy["evidence"]["key"] == "42"
    assert convoy["evidence"]["holders"][0]["application_name"] == "webhook-worker-1"
    assert convoy["since"].endswith("Z")
    assert lockwatch.metric("lockwatch_up", target="main") == 1
    assert (
        lockwatch.metric(
            "lockwatch_advisory_lock_waiters", target="main", database=pg.database, lock="42"
        )
        == 3
    )
    wait_until(lambda: "firing lock_convoy" in lockwatch.log(), message="the firing is logged")

    holder.close()
    for call in blocked:
        call.join()
    wait_until(lambda: lockwatch.finding("lock_convoy", "main") is None, message="convoy resolves")
    wait_until(
        lambda: "resolved lock_convoy" in lockwatch.log(), message="the resolution is logged"
    )
    everything = lockwatch.log() + requests.get(f"{lockwatch.base}/metrics", timeout=5).text
    assert MONITOR_PASSWORD not in everything


def test_sigterm_stops_the_daemon_cleanly_and_saves_its_state(
    tmp_path: Path, pg: PgDatabase, lockwatch: LockwatchProcess
) -> None:
    holder = pg.connect("app")
    holder.execute("SELECT pg_advisory_lock(7, 13)")
    lockwatch.start()
    wait_until(lambda: lockwatch.locks("main"), message="lock seen")
    assert lockwatch.stop() == 0, lockwatch.log()
    assert "lockwatch stopped" in lockwatch.log()
    saved = (tmp_path / "state" / "target-main.json").read_text()
    assert '"7,13"' in saved
    assert MONITOR_PASSWORD not in saved

    def lockwatch_sessions() -> int:
        with psycopg.connect(pg.admin_dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'lockwatch'"
            ).fetchone()
        return int(row[0]) if row else -1

    wait_until(lambda: lockwatch_sessions() == 0, message="lockwatch's session is gone")


# The silent target is no PostgreSQL at all and main's pace is lockwatch's own
# scheduling: one version proves it (each poll of silent hangs its whole
# connect timeout, the longest wait in this file).
@pytest.mark.parametrize("pg_server", ["pg18"], indirect=True)
def test_a_server_that_accepts_and_never_answers_delays_no_other_target(
    tmp_path: Path, pg: PgDatabase
) -> None:
    silent = Blackhole()
    host_port = silent.url.split("/")[2]
    port = free_port()
    config = write_config(
        tmp_path,
        port,
        {"main": pg.monitor_dsn, "silent": f"postgresql://lockwatch:secret-{port}@{host_port}/app"},
    )
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    lockwatch.start()
    try:
        down = wait_until(lambda: lockwatch.finding("target_down", "silent"), message="silent down")
        assert f"secret-{port}" not in down["summary"] + lockwatch.log()
        # Every silent poll hangs for its whole 2 s connect timeout; main, polled
        # every 500 ms, must keep its pace meanwhile.
        before = lockwatch.metric("lockwatch_polls_total", target="main") or 0
        silent_before = lockwatch.metric("lockwatch_polls_total", target="silent") or 0
        wait_until(
            lambda: (
                (lockwatch.metric("lockwatch_polls_total", target="silent") or 0)
                >= silent_before + 2
            ),
            message="two more hung polls of silent",
        )
        after = lockwatch.metric("lockwatch_polls_total", target="main") or 0
        assert after - before >= 6, f"main polled only {after - before} times in 4+ seconds"
        assert lockwatch.metric("lockwatch_up", target="main") == 1
    finally:
        assert lockwatch.stop() == 0, lockwatch.log(whole=True)
        silent.close()

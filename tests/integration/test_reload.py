"""Reload and shutdown of ``lockwatch run`` as a process: SIGHUP with a valid
and an invalid config, SIGTERM in the middle of an incident, and a restart."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.postgres import (
    MONITOR_PASSWORD,
    PgDatabase,
    free_port,
    queue_on_lock,
    wait_until,
)
from tests.fixtures.processes import LockwatchProcess, write_config

pytestmark = [
    pytest.mark.slow,
    # Reloading is the daemon's business, not the server's: one version is enough.
    pytest.mark.parametrize("pg_server", ["pg18"], indirect=True),
]


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def lockwatch(tmp_path: Path, port: int) -> Iterator[LockwatchProcess]:
    process = LockwatchProcess(tmp_path / "lockwatch.yml", tmp_path / "lockwatch.log", port)
    yield process
    if process.proc is not None:
        assert process.stop() == 0, process.log(whole=True)


def hold_seconds(lockwatch: LockwatchProcess, target: str, lock: str) -> float | None:
    for entry in lockwatch.locks(target):
        if entry["lock"] == lock:
            return float(entry["hold_seconds"])
    return None


def polls(lockwatch: LockwatchProcess, target: str) -> float:
    return lockwatch.metric("lockwatch_polls_total", target=target) or 0.0


def test_a_valid_reload_swaps_targets_and_keeps_what_the_kept_ones_learnt(
    tmp_path: Path, port: int, pg: PgDatabase, lockwatch: LockwatchProcess
) -> None:
    pg.connect("report-runner").execute("SELECT pg_advisory_lock(42)")
    dsn = pg.monitor_dsn
    write_config(tmp_path, port, {"main": dsn, "steady": dsn, "retired": dsn})
    lockwatch.start()
    held_before = wait_until(lambda: hold_seconds(lockwatch, "main", "42"), message="hold seen")
    wait_until(lambda: polls(lockwatch, "steady") >= 3, message="steady polled")
    main_polls, steady_polls = polls(lockwatch, "main"), polls(lockwatch, "steady")

    # main changes (a name for its lock), steady stays, retired goes, fresh comes.
    write_config(
        tmp_path,
        port,
        {"main": dsn, "steady": dsn, "fresh": dsn},
        extra={"main": "locks: {named: [{name: reports, key: 42}]}"},
    )
    lockwatch.reload()

    wait_until(lambda: "config reloaded" in lockwatch.log(), message=f"reloaded\n{lockwatch.log()}")
    assert "1 target(s) unchanged, 1 changed, 1 added, 1 removed" in lockwatch.log()
    held_after = wait_until(
        lambda: hold_seconds(lockwatch, "main", "reports"), message="the lock under its new name"
    )
    assert held_after >= held_before, "the reload forgot how long the lock has been held"
    wait_until(lambda: lockwatch.metric("lockwatch_up", target="fresh") == 1, message="fresh up")
    assert lockwatch.metric("lockwatch_up", target="retired") is None
    # Counters go on from where they were: neither runner started from zero.
    assert polls(lockwatch, "main") >= main_polls
    assert polls(lockwatch, "steady") >= steady_polls


def test_an_invalid_reload_is_rejected_with_every_problem_and_the_old_config_keeps_running(
    tmp_path: Path, port: int, pg: PgDatabase, lockwatch: LockwatchProcess
) -> None:
    config = write_config(tmp_path, port, {"main": pg.monitor_dsn})
    lockwatch.start()
    wait_until(lambda: polls(lockwatch, "main") >= 2, message="main polled")

    good = config.read_text()
    config.write_text(
        good.replace("interval: 500ms", "interval: soon").replace(
            "targets:", "targetz: []\ntargets:"
        )
    )
    lockwatch.reload()

    wait_until(lambda: "config reload rejected" in lockwatch.log(), message="rejection logged")
    log = lockwatch.log()
    assert "config reload rejected (2 problem(s)); still running the previous config" in log
    assert f"{config}:4: defaults.interval: " in log
    assert f"{config}:8: targetz: unknown key" in log
    before = polls(lockwatch, "main")
    wait_until(lambda: polls(lockwatch, "main") >= before + 3, message="main still polled")
    assert lockwatch.metric("lockwatch_up", target="main") == 1

    config.write_text(good)
    lockwatch.reload()
    wait_until(lambda: "config reloaded" in lockwatch.log(), message="the fixed config loads")


def test_sigterm_during_a_convoy_saves_it_and_the_restarted_daemon_carries_on(
    tmp_path: Path, port: int, pg: PgDatabase, lockwatch: LockwatchProcess
) -> None:
    write_config(tmp_path, port, {"main": pg.monitor_dsn})
    holder = pg.connect("webhook-worker-1")
    holder.execute("SELECT pg_advisory_lock(42)")
    waiters = [pg.connect(f"webhook-worker-{n}") for n in (2, 3)]
    blocked = [queue_on_lock(c, 42) for c in waiters]
    lockwatch.start()
    # Under load its since moved a second earlier after the restart, as it
    # would have at the next poll: judged against a since a poll agreed on.
    convoy = lockwatch.settled_finding("lock_convoy")

    started = time.monotonic()
    assert lockwatch.stop() == 0, lockwatch.log()
    print(f"SIGTERM to exit: {time.monotonic() - started:.2f}s")
    saved = json.loads((tmp_path / "state" / "target-main.json").read_text())
    assert [f["kind"] for f in saved["findings"] if f["kind"] == "lock_convoy"] == ["lock_convoy"]
    assert MONITOR_PASSWORD not in json.dumps(saved)

    lockwatch.start()
    assert "restored" in lockwatch.log()
    again = wait_until(lambda: lockwatch.finding("lock_convoy", "main"), message="convoy back")
    assert again["since"] == convoy["since"]
    wait_until(lambda: polls(lockwatch, "main") >= 3, message="polled after the restart")
    assert lockwatch.finding("lock_convoy", "main") is not None
    assert "firing lock_convoy" not in lockwatch.log(), "the convoy was announced twice"

    holder.close()
    for call in blocked:
        call.join()

"""``lockwatch incidents`` beside a daemon run as the README's systemd unit
runs it (issue 24, defect 4): the DSN from ``${CREDENTIALS_DIRECTORY}``,
which only the service has, and the state dir given by ``--state-dir``, not
by the config. The command must need no secret, find the daemon's incidents
however the daemon was told where to keep them, never say "no incidents"
when it could not look, and never move or repair a file of the daemon's
(issue 28, item 12)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.paths import ROOT
from tests.fixtures.postgres import PgDatabase, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess

pytestmark = [
    pytest.mark.pg,
    pytest.mark.slow,
    pytest.mark.parametrize("pg_server", ["pg18"], indirect=True),
]


@pytest.fixture
def service(tmp_path: Path, pg: PgDatabase) -> Iterator[tuple[LockwatchProcess, Path, Path]]:
    """The daemon as systemd starts it: ``run -c lockwatch.yml --state-dir DIR``."""
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "orders-dsn").write_text(pg.monitor_dsn + "\n")
    port = free_port()
    config = tmp_path / "lockwatch.yml"
    config.write_text(
        f"listen: 127.0.0.1:{port}\n"
        "defaults:\n  interval: 500ms\n  locks: {max_hold: 1s}\n"
        "targets:\n"
        "  - name: orders\n"
        "    dsn_file: ${CREDENTIALS_DIRECTORY}/orders-dsn\n"
    )
    state = tmp_path / "state"
    daemon = LockwatchProcess(
        config,
        tmp_path / "lockwatch.log",
        port,
        env={"CREDENTIALS_DIRECTORY": str(credentials)},
        args=("--state-dir", str(state)),
    )
    daemon.start()
    yield daemon, config, state
    daemon.stop()


def beside(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``lockwatch incidents`` as a person runs it on the host: without the
    service's credentials or state dir in the environment."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CREDENTIALS_DIRECTORY", "LOCKWATCH_STATE_DIR", "LOCKWATCH_URL")
    }
    return subprocess.run(
        [sys.executable, "-m", "lockwatch", "incidents", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**clean, **env},
        check=False,
    )


def open_ids(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode == 0, result.stderr
    return [i["id"] for i in json.loads(result.stdout)["incidents"] if i["state"] == "open"]


def test_incidents_beside_the_systemd_service_finds_the_open_one_without_its_secrets(
    service: tuple[LockwatchProcess, Path, Path], pg: PgDatabase
) -> None:
    daemon, config, state = service
    holder = pg.connect(application_name="report")
    holder.execute("SELECT pg_advisory_lock(42)")
    api = wait_until(lambda: daemon.finding("lock_held_too_long", "orders"), timeout=60)
    incident = api["incident"]

    # The config alone: it names no state dir, and its DSN variable is unset here.
    assert open_ids(beside("-c", str(config), "--json")) == [incident]
    table = beside("-c", str(config))
    assert incident in table.stdout and "read from the daemon at http://127.0.0.1:" in table.stderr
    # The state dir, as the service was given it: by flag or by variable.
    wait_until((state / "target-orders.json").exists, message="the state saved")
    assert open_ids(beside("--state-dir", str(state), "--json")) == [incident]
    assert open_ids(beside("--json", LOCKWATCH_STATE_DIR=str(state))) == [incident]
    # The daemon's address, without a config.
    assert open_ids(beside("--json", LOCKWATCH_URL=daemon.base)) == [incident]

    holder.execute("SELECT pg_advisory_unlock_all()")
    wait_until(lambda: daemon.finding("lock_held_too_long", "orders") is None, timeout=30)
    daemon.stop()
    # Stopped, and nothing says where its state is: not "no incidents", but why not.
    blind = beside("-c", str(config))
    assert blind.returncode == 3, blind
    assert "no incidents" not in blind.stdout
    assert "could not look" in blind.stderr and "--state-dir" in blind.stderr
    # The postmortem with the state dir: the resolved incident with its story.
    whole = beside("--state-dir", str(state), "--id", incident)
    assert whole.returncode == 0, whole.stderr
    assert "resolved" in whole.stdout and "timeline:" in whole.stdout


def test_a_reading_command_leaves_a_corrupt_history_file_where_it_is(
    service: tuple[LockwatchProcess, Path, Path],
) -> None:
    daemon, _, state = service
    daemon.stop()
    history = state / "incidents-history.json"
    history.write_bytes(b'{"version": 1, "incidents": [')
    before = sorted(p.name for p in state.iterdir())
    result = beside("--state-dir", str(state))
    assert result.returncode == 1, result
    assert "the resolved incidents cannot be read" in result.stderr
    assert str(history) in result.stderr
    assert sorted(p.name for p in state.iterdir()) == before
    assert history.read_bytes() == b'{"version": 1, "incidents": ['

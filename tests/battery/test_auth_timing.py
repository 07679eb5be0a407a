"""Basic auth timed from outside: does a wrong password for a user who exists
take longer than any password for one who does not? (It told user names
apart: a decoy hash of bcrypt's default cost against users' hashes of a
higher one.) The time is read from outside, and judged by the daemon's own
CPU for each request: the work an attacker times, which the machine's other
work does not change (beside CPU-bound neighbours, no try of six may run
alone, and the fastest of each was 0.73 apart with equal work)."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import bcrypt
import psutil
import pytest
import requests

from tests.battery.conftest import Record
from tests.fixtures.postgres import PgDatabase, free_port
from tests.fixtures.processes import LockwatchProcess, write_config

pytestmark = [pytest.mark.pg, pytest.mark.slow]

USER = "prometheus"
COST = 13  # each step doubles bcrypt's time: twice the default of 12
TRIES = 6  # of each kind, taken in turn


class GuardedLockwatch(LockwatchProcess):
    """Started once it answers at all: without credentials, a 401."""

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"lockwatch exited with {self.proc.returncode}:\n{self.log()}")
        try:
            return requests.get(f"{self.base}/healthz", timeout=2).status_code == 401
        except requests.ConnectionError:
            return False


def test_an_unknown_user_is_refused_no_sooner_than_a_known_one_with_a_wrong_password(
    tmp_path: Path, battery_db: PgDatabase, battery: Record
) -> None:
    password = "scrape-" + secrets.token_hex(8)
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=COST)).decode()
    (tmp_path / "web.yml").write_text(f"basic_auth_users:\n  {USER}: '{hashed}'\n")
    port = free_port()
    config = write_config(tmp_path, port, {"main": battery_db.monitor_dsn})
    with config.open("a") as extra:
        extra.write(f"web_config: {tmp_path / 'web.yml'}\n")
    lockwatch = GuardedLockwatch(config, tmp_path / "lockwatch.log", port)

    def refused_in(user: str) -> tuple[float, float]:
        """Seconds of wall time and of the daemon's CPU to refuse ``user``."""
        assert lockwatch.proc is not None
        daemon = psutil.Process(lockwatch.proc.pid)
        cpu, started = sum(daemon.cpu_times()[:2]), time.perf_counter()
        response = requests.get(f"{lockwatch.base}/metrics", auth=(user, "wrong"), timeout=30)
        took = time.perf_counter() - started
        assert response.status_code == 401
        return took, sum(daemon.cpu_times()[:2]) - cpu

    try:
        lockwatch.start()  # inside: a start that fails still stops the process
        known: list[tuple[float, float]] = []
        unknown: list[tuple[float, float]] = []
        for _ in range(TRIES):
            known.append(refused_in(USER))
            unknown.append(refused_in("admin"))
    finally:
        lockwatch.stop()
    # The least CPU of each: the check's own cost (the daemon's polls add a
    # little, never less). Equal work gives about 1; the default-cost decoy
    # gave a half.
    ratio = min(cpu for _, cpu in unknown) / min(cpu for _, cpu in known)
    assert ratio > 0.75, f"unknown {unknown} against known {known} (wall s, CPU s)"
    known_wall, unknown_wall = [wall for wall, _ in known], [wall for wall, _ in unknown]
    battery(
        "auth-timing",
        injected=(
            f"basic_auth_users with a bcrypt hash of cost {COST}; {TRIES} requests each, in "
            "turn, with a wrong password for the known user and for an unknown one"
        ),
        did=(
            f"refused each (401): known user {min(known_wall):.2f}-{max(known_wall):.2f} s, "
            f"unknown user {min(unknown_wall):.2f}-{max(unknown_wall):.2f} s (an unknown name "
            "is checked against a decoy hash of the users' own cost)"
        ),
        intact=(
            f"yes: the daemon's least CPU for a refusal, unknown/known {ratio:.2f}; a name is "
            "not told apart by time"
        ),
    )

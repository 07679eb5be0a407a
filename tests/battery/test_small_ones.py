"""Small ones of the second round: /metrics compressed for a scraper that
accepts gzip; a state file damaged at every start leaves a bounded number of
copies aside."""

from __future__ import annotations

import gzip
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.battery.conftest import Record
from tests.battery.probes import Scrape
from tests.fixtures.postgres import MONITOR_USER, PgDatabase, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config
from tests.fixtures.standins import ChatStandin, add_telegram

pytestmark = [pytest.mark.pg, pytest.mark.slow]

STARTS = 5  # each with the state file damaged again
KEPT = 3  # lockwatch.state.statefile.KEEP_UNREADABLE


def test_metrics_are_gzipped_for_a_scraper_that_accepts_it(
    tmp_path: Path, battery_db: PgDatabase, battery: Record
) -> None:
    port = free_port()
    config = write_config(tmp_path, port, {"main": battery_db.monitor_dsn})
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    lockwatch.start()
    try:
        wait_until(lambda: lockwatch.metric("lockwatch_up", target="main") == 1)
        url = f"{lockwatch.base}/metrics"
        zipped = requests.get(url, headers={"Accept-Encoding": "gzip"}, timeout=10, stream=True)
        raw = zipped.raw.read(decode_content=False)
        plain = requests.get(url, headers={"Accept-Encoding": "identity"}, timeout=10)
        refused = requests.get(url, headers={"Accept-Encoding": "gzip;q=0"}, timeout=10)
    finally:
        lockwatch.stop()
    assert zipped.headers.get("Content-Encoding") == "gzip" and raw[:2] == b"\x1f\x8b"
    assert "Accept-Encoding" in zipped.headers.get("Vary", "")
    unzipped = gzip.decompress(raw).decode()
    assert Scrape.parse(unzipped).get("lockwatch_up", target="main") == 1
    assert "Content-Encoding" not in plain.headers and "Content-Encoding" not in refused.headers
    assert Scrape.parse(plain.text).get("lockwatch_up", target="main") == 1
    battery(
        "metrics-gzip",
        injected="GET /metrics with Accept-Encoding: gzip, identity, and gzip;q=0",
        did=(
            f"gzip for the first ({len(raw):,} bytes for {len(unzipped.encode()):,}), "
            "Vary: Accept-Encoding; plain text for the others"
        ),
        intact="yes: the gzipped exposition parses to the same series (lockwatch_up 1)",
    )


def test_a_state_file_damaged_at_every_start_leaves_only_the_last_few_copies(
    tmp_path: Path, battery_db: PgDatabase, battery: Record
) -> None:
    port = free_port()
    config = write_config(tmp_path, port, {"main": battery_db.monitor_dsn})
    state = tmp_path / "state"
    state.mkdir()
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    for start in range(STARTS):
        # A new second each time: the copies are named by the second they were made.
        (state / "target-main.json").write_text(f'{{"damaged": {start}')
        lockwatch.start()
        assert lockwatch.stop() == 0
    copies = sorted(path.name for path in state.glob("target-main.json.unreadable-*"))
    moved = lockwatch.log(whole=True).count("moved aside to")
    assert moved == STARTS, lockwatch.log(whole=True)[-2000:]
    assert len(copies) == KEPT, copies
    assert (state / copies[-1]).read_text() == f'{{"damaged": {STARTS - 1}'
    battery(
        "unreadable-copies",
        injected=f"the target's state file damaged before each of {STARTS} starts",
        did=f"moved aside each time ({moved} log lines); kept the last {len(copies)} copies",
        intact="yes: the newest damaged copy kept for a person to look at; no unbounded pile",
    )


def test_doctor_snapshot_and_demo_refuse_a_password_with_an_unencoded_at_sign(
    battery_db: PgDatabase, battery: Record
) -> None:
    server = battery_db.server
    tail = "tail-" + secrets.token_hex(4)
    dsn = f"postgresql://{MONITOR_USER}:ngPW-777@{tail}@{server.host}:{server.port}/postgres"
    ran = {
        name: subprocess.run(
            [sys.executable, "-m", "lockwatch", *args, dsn],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        for name, args in (
            ("doctor", ["doctor", "--dsn"]),
            ("doctor --monitoring", ["doctor", "--monitoring", "--dsn"]),
            ("snapshot", ["snapshot", "--dsn"]),
            ("demo", ["demo", "--duration", "1s", "--dsn"]),
        )
    }
    for name, done in ran.items():
        said = done.stdout + done.stderr
        assert done.returncode == 2, (name, said)
        assert "not percent-encoded" in said and tail not in said, (name, said)
        assert "resolve host" not in said, (name, said)
    battery(
        "dsn-at-commands",
        injected=(
            "lockwatch doctor, doctor --monitoring, snapshot and demo with --dsn whose password "
            "holds an unencoded '@' (libpq would take its tail for the host)"
        ),
        did=f"each refused it before connecting, exit 2 ({', '.join(ran)}), as check-config and run do",
        intact="yes: no connection to the password's tail; the tail in no output",
    )


def test_a_notify_change_is_applied_by_a_reload(
    tmp_path: Path, battery_db: PgDatabase, battery: Record
) -> None:
    first, second = ChatStandin(), ChatStandin()
    port = free_port()

    def configure(receiver: ChatStandin) -> Path:
        config = write_config(tmp_path, port, {"main": battery_db.monitor_dsn})
        add_telegram(config, receiver)
        return config

    lockwatch = LockwatchProcess(configure(first), tmp_path / "lockwatch.log", port)
    holder = battery_db.connect("nightly-report")
    try:
        lockwatch.start()
        holder.execute("SELECT pg_advisory_lock(91)")
        wait_until(lambda: first.delivered("telegram"), timeout=30, message="told the first")
        holder.execute("SELECT pg_advisory_unlock(91)")
        wait_until(lambda: len(first.delivered("telegram")) >= 2, timeout=30, message="resolved")
        told_first = len(first.delivered("telegram"))
        configure(second)
        lockwatch.reload()
        wait_until(lambda: "notify applied" in lockwatch.log(), message="the reload applied")
        holder.execute("SELECT pg_advisory_lock(92)")
        wait_until(lambda: second.delivered("telegram"), timeout=30, message="told the second")
        holder.execute("SELECT pg_advisory_unlock(92)")
        told_second = len(second.delivered("telegram"))
        log = lockwatch.log()
    finally:
        lockwatch.stop()
        first.close()
        second.close()
    assert len(first.delivered("telegram")) == told_first  # nothing more to the old channel
    assert "takes effect at the next restart" not in log
    battery(
        "notify-reload",
        injected=(
            "the notify section's Telegram channel pointed at another receiver, then SIGHUP; "
            "a lock held past its budget before and after"
        ),
        did=(
            f"applied on the reload ('notify applied'): the first receiver got {told_first} "
            f"message(s) before it, the second {told_second} after"
        ),
        intact="yes: nothing sent to the old receiver after the reload; no restart needed",
    )

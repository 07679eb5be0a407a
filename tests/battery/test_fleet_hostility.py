"""A fleet against lockwatch: discovered targets that never answer (a tarpit
that accepts and says nothing), withdrawn from the list, and lockwatch
stopped while they hang."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from lockwatch.publish.status.incidents import TARGET_CARDS
from lockwatch.publish.status.page import DOWN_ROWS
from lockwatch.scheduler import MAX_POLLERS
from tests.battery.conftest import Record
from tests.battery.probes import Scrape, footprint
from tests.fixtures.postgres import (
    MONITOR_PASSWORD,
    MONITOR_USER,
    PgDatabase,
    free_port,
    wait_until,
)
from tests.fixtures.processes import LockwatchProcess
from tests.fixtures.tarpit import Tarpit

pytestmark = [pytest.mark.pg, pytest.mark.slow]

# Discovered addresses that never answer: more than the poller pool
# (MAX_POLLERS), so their hung polls queue behind one another as a big
# fleet's do. Twice as many took twice as long to back off, proving no more.
PITS = 100
CONNECT_TIMEOUT = 2.0
TIMEOUT_STOP = 20.0  # systemd/lockwatch.service's TimeoutStopSec
BACKED_OFF = 4.0  # seconds between looks (8 intervals) by which the fleet counts as backed off


@pytest.fixture
def tarpit() -> Iterator[Tarpit]:
    pit = Tarpit(PITS)
    try:
        yield pit
    finally:
        pit.close()


def write_sd(path: Path, addresses: list[str]) -> None:
    """As file_sd writers do: a new file renamed over the old one."""
    part = path.with_name(path.name + ".new")
    part.write_text(json.dumps([{"targets": addresses}] if addresses else []), encoding="utf-8")
    os.replace(part, path)


def fleet_config(tmp_path: Path, port: int, main_dsn: str, sd: Path) -> Path:
    (tmp_path / "monitor-password").write_text(MONITOR_PASSWORD)
    (tmp_path / "main.dsn").write_text(main_dsn + "\n")
    config = tmp_path / "lockwatch.yml"
    config.write_text(
        f"""
listen: 127.0.0.1:{port}
state_dir: {tmp_path / "state"}
defaults:
  interval: 500ms
  connect_timeout: {CONNECT_TIMEOUT:g}s
  statement_timeout: 2s
auth_modules:
  - name: monitor
    user: {MONITOR_USER}
    password_file: {tmp_path / "monitor-password"}
    sslmode: disable
target_sources:
  - name: pits
    file: {sd}
    auth_module: monitor
    refresh_interval: 1s
targets:
  - name: main
    dsn_file: {tmp_path / "main.dsn"}
""",
        encoding="utf-8",
    )
    return config


# /metrics has some 1.8 KiB a pit: the waits below read the few lines they
# need off its text, as a scraper's query would. Parsing all of it twenty
# times a second to count main's polls kept a core busy, and parsing it at
# every look of the waits on the fleet was most of the test's own CPU; the
# scrape the numbers are reported from is parsed (and so checked) whole.
MAIN_POLLS = re.compile(r'^lockwatch_polls_total\{target="main"\} (\S+)$', re.M)
# The fleet's state changes at its looks (every 0.5 s at most): waits on a
# whole scrape look this often, not at wait_until's default 50 ms.
SCRAPE_EVERY = 0.5


def metrics_text(lockwatch: LockwatchProcess) -> str:
    response = requests.get(f"{lockwatch.base}/metrics", timeout=10)
    response.raise_for_status()
    return response.text


def pit_series(text: str, name: str) -> dict[str, float]:
    """A family's values for the discovered targets (all but main), by target,
    from the text of /metrics."""
    line = re.compile(rf'^{re.escape(name)}\{{target="([^"]+)"\}} (\S+)$', re.M)
    return {target: float(value) for target, value in line.findall(text) if target != "main"}


def polls_of_main(lockwatch: LockwatchProcess) -> float:
    found = MAIN_POLLS.search(metrics_text(lockwatch))
    return float(found.group(1)) if found else 0


def wait_polls(lockwatch: LockwatchProcess, polls: int) -> None:
    """Until main polled ``polls`` more times: time measured in lockwatch's own polls."""
    start = polls_of_main(lockwatch)
    wait_until(lambda: polls_of_main(lockwatch) >= start + polls, timeout=60, interval=0.1)


def test_an_unreachable_fleet_backs_off_stops_when_withdrawn_and_lockwatch_stops_in_time(
    tmp_path: Path, battery_db: PgDatabase, tarpit: Tarpit, battery: Record
) -> None:
    assert PITS > MAX_POLLERS
    port = free_port()
    sd = tmp_path / "pits.json"
    write_sd(sd, tarpit.addresses)
    config = fleet_config(tmp_path, port, battery_db.monitor_dsn, sd)
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    lockwatch.start()
    assert lockwatch.proc is not None
    try:
        # Every pit down, and looked at every BACKED_OFF seconds or more (shown).
        def backed_off() -> str | None:
            text = metrics_text(lockwatch)
            up, pace = (
                pit_series(text, "lockwatch_up"),
                pit_series(text, "lockwatch_poll_interval_seconds"),
            )
            settled = len(up) == len(pace) == PITS and set(up.values()) == {0.0}
            return text if settled and min(pace.values()) >= BACKED_OFF else None

        seen = Scrape.parse(
            wait_until(
                backed_off,
                timeout=120,
                interval=2 * SCRAPE_EVERY,  # backing off takes a minute: a second late is nothing
                message="the fleet down and backed off",
            )
        )
        parsed = {
            labels["target"]: value
            for sample, labels, value in seen.samples
            if sample == "lockwatch_up" and labels["target"] != "main"
        }
        assert parsed == pit_series(seen.text, "lockwatch_up")  # the lines read as parsed
        skipped = sum(
            value
            for sample, labels, value in seen.samples
            if sample == "lockwatch_poll_slots_skipped_total" and labels["reason"] == "unreachable"
        )
        page = requests.get(f"{lockwatch.base}/?refresh=off", timeout=30).text
        metrics_bytes = len(seen.text.encode())
        before = tarpit.connects()
        wait_polls(lockwatch, 16)  # 8 s of main's polls
        window = tarpit.connects() - before
        busiest = max(window.values(), default=0)
        assert busiest <= 2, f"a pit was tried {busiest} times in 8 s: {window.most_common(3)}"

        # Withdrawn: no more lockwatch_up series and no more connections, at once.
        withdrawn_at = time.monotonic()
        write_sd(sd, [])
        wait_until(
            lambda: not pit_series(metrics_text(lockwatch), "lockwatch_up"),
            timeout=30,
            interval=SCRAPE_EVERY / 2,
            message="the withdrawn targets unpublished",
        )
        unpublished = time.monotonic() - withdrawn_at
        settled = tarpit.connects()
        wait_polls(lockwatch, 8)
        after = sum((tarpit.connects() - settled).values())
        assert after == 0, f"{after} connections to withdrawn targets"
        rss = footprint(lockwatch.proc.pid).rss_mb

        # Listed again, then withdrawn and SIGTERM at once, while they hang.
        write_sd(sd, tarpit.addresses)
        wait_until(
            lambda: len(pit_series(metrics_text(lockwatch), "lockwatch_up")) == PITS,
            timeout=60,
            interval=SCRAPE_EVERY,
        )
        write_sd(sd, [])
        wait_polls(lockwatch, 3)  # past the source's refresh_interval: being withdrawn
        stopping = time.monotonic()
        lockwatch.proc.send_signal(signal.SIGTERM)
        lockwatch.proc.wait(timeout=TIMEOUT_STOP * 2)
        took = time.monotonic() - stopping
        assert lockwatch.proc.returncode == 0, lockwatch.log()[-2000:]
        assert took < TIMEOUT_STOP, f"stopping took {took:.1f} s"
    finally:
        lockwatch.stop()

    lines = lockwatch.log().splitlines()
    about_pits = [line for line in lines if re.search(r"127\.0\.0\.1_\d+", line)]
    per_pit = len(about_pits) / PITS
    overruns = sum(1 for line in about_pits if "overran" in line)
    assert per_pit <= 8, f"{per_pit:.1f} log lines per unreachable target"
    summaries = [line for line in lines if "target(s) cannot be sampled" in line]
    assert summaries and len(summaries) <= 4, summaries  # at most one a minute
    assert f"and {PITS - DOWN_ROWS} more targets down" in page
    assert f"and {PITS - TARGET_CARDS} more incidents of targets" in page
    page_rows = page.count("<tr")
    battery(
        "fleet-withdrawn",
        injected=(
            f"a file_sd list of {PITS} addresses that accept and never answer "
            f"(connect_timeout {CONNECT_TIMEOUT:g} s, interval 0.5 s), with one real target; "
            "then the list replaced by [], listed again, replaced by [] and SIGTERM 1.5 s later"
        ),
        did=(
            f"backed off to ≥{BACKED_OFF:g} s between looks (lockwatch_poll_interval_seconds; "
            f"{skipped:.0f} slots skipped as unreachable), each pit tried at most {busiest} "
            f"time(s) in 8 s; withdrawn targets unpublished {unpublished:.1f} s after the "
            f"list changed; stopped {took:.1f} s after SIGTERM, exit 0 "
            f"(systemd's TimeoutStopSec {TIMEOUT_STOP:g} s); the page {len(page) // 1024} KiB "
            f"({page_rows} table rows: {DOWN_ROWS} down targets, the rest named in one), "
            f"/metrics {metrics_bytes // 1024} KiB; {len(summaries)} summary log line(s)"
        ),
        intact=(
            f"yes: 0 connections to withdrawn targets over 8 polls of main; "
            f"{per_pit:.1f} log lines per unreachable target over the run "
            f"({overruns} 'overran' lines for {PITS} targets); RSS {rss:.0f} MB"
        ),
    )


class HostileSd:
    """An http_sd endpoint on 127.0.0.1 that answers as told: ``good`` (a list
    of one real server), ``deep`` (JSON nested DEPTH deep) or ``huge`` (HUGE_MB
    of a list that never closes, streamed without a length); it counts the
    bytes it managed to send of each answer."""

    def __init__(self, good: list[dict[str, object]]) -> None:
        self.mode = "good"
        self.sent: list[int] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # the body ends when the connection does

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                sent = 0
                try:
                    for chunk in endpoint.body(good):
                        self.wfile.write(chunk)
                        sent += len(chunk)
                except OSError:
                    pass  # lockwatch stopped reading: what was sent is counted
                endpoint.sent.append(sent)

            def log_message(self, format: str, *args: object) -> None:
                """Quiet."""

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def body(self, good: list[dict[str, object]]) -> Iterator[bytes]:
        if self.mode == "good":
            yield json.dumps(good).encode()
        elif self.mode == "deep":
            yield b"[" * DEPTH + b"]" * DEPTH
        else:
            entry = json.dumps({"targets": ["127.0.0.1:1"]}).encode() + b","
            chunk = b"[" + entry * (1024 * 1024 // len(entry))
            for _ in range(HUGE_MB):
                yield chunk

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/sd"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


DEPTH = 100_000
HUGE_MB = 300


def source_value(lockwatch: LockwatchProcess, family: str) -> float:
    return lockwatch.metric(family, source="hostile", kind="http") or 0.0


def test_a_hostile_http_sd_answer_is_a_source_error_and_the_last_good_list_stays(
    tmp_path: Path, battery_db: PgDatabase, battery: Record
) -> None:
    cluster = battery_db.server
    named = {"name": "discovered", "database": battery_db.database}
    endpoint = HostileSd([{"targets": [f"{cluster.host}:{cluster.port}"], "labels": named}])
    port = free_port()
    config = fleet_config(tmp_path, port, battery_db.monitor_dsn, tmp_path / "unused.json")
    write_sd(tmp_path / "unused.json", [])
    text = config.read_text().replace(
        "target_sources:\n",
        f"target_sources:\n  - name: hostile\n    url: {endpoint.url}\n"
        "    auth_module: monitor\n    refresh_interval: 1s\n",
    )
    config.write_text(text)
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    try:
        endpoint.mode = "deep"  # at startup
        lockwatch.start()
        assert lockwatch.proc is not None
        wait_until(lambda: source_value(lockwatch, "lockwatch_target_source_errors_total") >= 2)
        assert lockwatch.metric("lockwatch_target_source_up", source="hostile", kind="http") == 0

        endpoint.mode = "good"
        wait_until(lambda: lockwatch.metric("lockwatch_up", target="discovered") == 1, timeout=30)

        endpoint.mode = "deep"  # while running: the last good list stays
        errors = source_value(lockwatch, "lockwatch_target_source_errors_total")
        wait_until(
            lambda: source_value(lockwatch, "lockwatch_target_source_errors_total") >= errors + 2
        )
        deep_up = lockwatch.metric("lockwatch_target_source_up", source="hostile", kind="http")
        assert deep_up == 0
        assert lockwatch.metric("lockwatch_up", target="discovered") == 1

        before = footprint(lockwatch.proc.pid).rss_mb
        endpoint.mode = "huge"
        errors = source_value(lockwatch, "lockwatch_target_source_errors_total")
        wait_until(
            lambda: source_value(lockwatch, "lockwatch_target_source_errors_total") >= errors + 2,
            timeout=60,
        )
        peak = footprint(lockwatch.proc.pid).rss_mb
        assert lockwatch.metric("lockwatch_up", target="discovered") == 1
        read_mb = max(endpoint.sent) / 2**20
        assert peak - before < 40, f"RSS {before:.0f} MB -> {peak:.0f} MB"
        assert read_mb < 40, f"{read_mb:.0f} MB of the huge answer sent before it was cut"
        exit_code = lockwatch.stop()
    finally:
        lockwatch.stop()
        endpoint.close()
    log = lockwatch.log()
    assert "Traceback" not in log, log[-3000:]
    assert exit_code == 0
    said = [line for line in log.splitlines() if "target source hostile" in line]
    assert len(said) <= 6, said  # once per change of error, not per read
    battery(
        "sd-hostile",
        injected=(
            f"an http_sd answer of JSON nested {DEPTH:,} deep, at startup and while running; "
            f"then an endless answer ({HUGE_MB} MB streamed without a length)"
        ),
        did=(
            "started and kept running; each a source error: lockwatch_target_source_up 0, "
            f"errors counted, {len(said)} log lines in all, no traceback; the endless answer cut "
            f"after {read_mb:.0f} MB sent (the cap is 16 MiB)"
        ),
        intact=(
            "yes: the last good list stayed watched (lockwatch_up{target=discovered} 1); "
            f"RSS {before:.0f} MB before the endless answer, {peak:.0f} MB after it"
        ),
    )

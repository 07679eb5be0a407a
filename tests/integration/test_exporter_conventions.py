"""``lockwatch run`` speaks the conventions of Prometheus exporters: the flag
names, logfmt and JSON logs in UTC, settings from ``LOCKWATCH_…`` variables,
``process_*`` metrics, ``HEAD`` on every GET path and no version in ``Server``."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from click.testing import CliRunner

from lockwatch.cli import main
from lockwatch.logs import setup_logging
from tests.fixtures.postgres import PgDatabase, wait_until

SERVING = re.compile(r"serving metrics and API on http://([^ /\"]+)/")


class Run:
    """One ``lockwatch run`` process with its stderr in a file."""

    def __init__(self, tmp_path: Path, args: list[str], env: dict[str, str]) -> None:
        self.log_path = tmp_path / "stderr.log"
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "lockwatch", "run", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **env},
            )

    def log(self) -> str:
        if self.proc.poll() is not None and self.proc.returncode not in (0, -signal.SIGTERM):
            raise AssertionError(f"lockwatch exited with {self.proc.returncode}:\n{self.log_text}")
        return self.log_text

    @property
    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def bases(self, count: int) -> list[str]:
        found = wait_until(
            lambda: len(SERVING.findall(self.log())) >= count and SERVING.findall(self.log()),
            timeout=60,
            message="lockwatch serving",
        )
        return [f"http://{where}" for where in found]

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Any]:
    started: list[Run] = []

    def start(*args: str, **env: str) -> Run:
        run = Run(tmp_path, list(args), env)
        started.append(run)
        return run

    yield start
    for run in started:
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait(timeout=30)


@pytest.mark.pg
@pytest.mark.slow
@pytest.mark.parametrize("pg_server", ["pg18"], indirect=True)
def test_json_logs_a_first_poll_line_and_the_web_flags(pg: PgDatabase, launch: Any) -> None:
    holder = pg.connect("app")
    holder.execute("SELECT pg_advisory_lock(7)")
    run = launch(
        "--web.listen-address=127.0.0.1:0",
        "--web.listen-address",
        "127.0.0.1:0",
        "--web.telemetry-path=/probe",
        "--log.format=json",
        "--interval=1s",
        LOCKWATCH_DSN=pg.monitor_dsn,
    )
    first, second = run.bases(2)
    assert first != second
    wait_until(lambda: "first poll ok" in run.log(), message="a first-poll line")

    events = [json.loads(line) for line in run.log().splitlines()]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", e["ts"]) for e in events)
    assert {"ts", "level", "logger", "msg"} <= set(events[0])
    (poll,) = [e for e in events if "first poll ok" in e["msg"]]
    assert re.fullmatch(r"default: first poll ok: 1 locks held, 0 waiting, \d+ ms", poll["msg"])
    assert poll["level"] == "info"

    for base in (first, second):
        metrics = requests.get(f"{base}/probe", timeout=5)
        assert metrics.status_code == 200
        assert "process_cpu_seconds_total" in metrics.text
        assert "process_resident_memory_bytes" in metrics.text
        assert "lockwatch_up" in metrics.text
        assert metrics.headers["Server"] == "lockwatch"
    assert requests.get(f"{first}/metrics", timeout=5).status_code == 404
    assert run.stop() == 0, run.log_text


@pytest.mark.pg
@pytest.mark.slow
@pytest.mark.parametrize("pg_server", ["pg18"], indirect=True)
def test_head_answers_every_get_path_and_logfmt_comes_from_the_environment(
    pg: PgDatabase, launch: Any
) -> None:
    run = launch(
        "--interval=1s",
        LOCKWATCH_DSN=pg.monitor_dsn,
        LOCKWATCH_WEB_LISTEN_ADDRESS="127.0.0.1:0",
        LOCKWATCH_LOG_FORMAT="logfmt",
        LOCKWATCH_LOG_LEVEL="info",
    )
    (base,) = run.bases(1)
    wait_until(lambda: "first poll ok" in run.log(), message="a first-poll line")
    for path in ("/", "/metrics", "/healthz", "/api/v1/findings", "/api/v1/locks"):
        got = requests.get(f"{base}{path}", timeout=5)
        head = requests.head(f"{base}{path}", timeout=5)
        assert head.status_code == got.status_code == 200, path
        assert head.content == b"", path
        assert head.headers["Content-Type"] == got.headers["Content-Type"], path
        assert head.headers["Server"] == "lockwatch", path
    refused = requests.delete(f"{base}/metrics", timeout=5)
    assert refused.status_code == 405
    assert refused.headers["Allow"] == "GET, HEAD"
    for line in run.log().splitlines():
        assert re.match(r"ts=\S+Z level=\w+ logger=\S+ msg=", line), line
    assert run.stop() == 0, run.log_text


def test_the_old_flag_spellings_still_parse_and_listen_takes_a_bare_port() -> None:
    runner = CliRunner()
    for flags in (
        ["--listen", "localhost"],
        ["--web.listen-address", "127.0.0.1"],
        ["--web.telemetry-path", "metrics"],
        ["--web.telemetry-path", "/healthz"],
        ["--log.format", "xml"],
    ):
        result = runner.invoke(main, ["run", "--dsn", "host=127.0.0.1", *flags])
        assert result.exit_code == 2, (flags, result.output)
    help_text = runner.invoke(main, ["run", "--help"]).output
    for flag in (
        "--web.listen-address, --listen",
        "--web.config.file, --web-config",
        "--web.telemetry-path",
        "-c, --config.file, --config",
        "--log.level, --log-level",
        "--log.format",
        "LOCKWATCH_WEB_LISTEN_ADDRESS",
    ):
        assert flag in help_text, flag
    assert ":PORT means every interface" in " ".join(help_text.split())
    both = runner.invoke(main, ["run", "--config.file", "x.yml", "--dsn", "host=127.0.0.1"])
    assert both.exit_code == 2
    assert "exclude each other" in both.output


def test_logfmt_and_json_put_one_event_on_one_line_even_with_a_traceback() -> None:
    import io

    for log_format in ("logfmt", "json"):
        stream = io.StringIO()
        setup_logging("info", log_format, stream)
        try:
            try:
                raise ValueError("two\nlines")
            except ValueError:
                logging.getLogger("lockwatch.test").exception("it broke")
            logging.getLogger("psycopg").warning("the library's own chatter")
        finally:
            setup_logging("warning", "text")
        lines = stream.getvalue().splitlines()
        assert len(lines) == 1, lines
        assert "it broke" in lines[0] and "ValueError" in lines[0]
        if log_format == "json":
            assert "two\nlines" in json.loads(lines[0])["error"]

"""Pings and ``lockwatch exec``: bad requests change nothing; the wrapped
command runs on time whatever lockwatch does."""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from lockwatch.demo.scenarios import Blackhole
from lockwatch.model.jobs import RunStatus
from lockwatch.publish.http import HttpServer
from lockwatch.publish.metrics.registry import Metrics
from lockwatch.publish.pings import MAX_BODY, TOKEN_HEADER, PingReceiver
from lockwatch.state.board import Board
from lockwatch.state.jobstore import SqliteJobStore
from tests.fixtures.postgres import wait_until

TOKEN = "ping-token-7f3a9"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SINCE = datetime(2000, 1, 1, tzinfo=UTC)


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[PingReceiver]:
    store = SqliteJobStore(tmp_path / "jobs.sqlite3")
    yield PingReceiver(jobs={"nightly"}, token=TOKEN, store=store)
    store.close()


def test_a_start_and_a_success_ping_make_a_finished_run(receiver: PingReceiver) -> None:
    started = receiver.handle(
        "/ping/nightly/start", "", AUTH, b'{"host": "app-1", "run_key": "2026-11-29"}'
    )
    assert started.status is HTTPStatus.OK
    run_id = started.body["run_id"]
    done = receiver.handle(
        "/ping/nightly/success", "", AUTH, json.dumps({"run_id": run_id, "exit_code": 0}).encode()
    )
    assert done.body["status"] == "success"
    (run,) = receiver.store.runs("nightly", SINCE)
    assert run.status is RunStatus.SUCCESS and run.host == "app-1" and run.run_key == "2026-11-29"


def test_a_start_ping_with_a_pid_keeps_it_with_the_run(receiver: PingReceiver) -> None:
    started = receiver.handle("/ping/nightly/start", "", AUTH, b'{"host": "app-1", "pid": 8123}')
    assert started.status is HTTPStatus.OK
    (run,) = receiver.store.runs("nightly", SINCE)
    assert (run.host, run.pid) == ("app-1", 8123)
    refused = receiver.handle("/ping/nightly/start", "", AUTH, b'{"pid": -1}')
    assert refused.status is HTTPStatus.BAD_REQUEST and "pid" in refused.body["error"]


def test_a_store_made_before_runs_had_a_pid_gets_the_column(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    with closing(sqlite3.connect(path)) as old:
        old.execute(
            "CREATE TABLE job_runs (job TEXT NOT NULL, run_id TEXT NOT NULL, run_key TEXT,"
            " host TEXT, source TEXT NOT NULL, started_at TEXT NOT NULL, finished_at TEXT,"
            " status TEXT NOT NULL, exit_code INTEGER, PRIMARY KEY (job, run_id))"
        )
        old.execute(
            "INSERT INTO job_runs VALUES ('nightly', 'r1', NULL, 'app-1', 'ping',"
            " '2026-01-01T00:00:00+00:00', NULL, 'running', NULL)"
        )
        old.commit()
    store = SqliteJobStore(path)
    try:
        (run,) = store.runs("nightly", SINCE)
        assert (run.run_id, run.pid) == ("r1", None)
    finally:
        store.close()


@pytest.mark.parametrize(
    ("path", "query", "headers", "body", "status"),
    [
        ("/ping/nightly/start", "", {}, b"", HTTPStatus.UNAUTHORIZED),
        ("/ping/nightly/start", "", {"Authorization": "Bearer nope"}, b"", HTTPStatus.FORBIDDEN),
        ("/ping/nightly/start", f"token={TOKEN}", {}, b"", HTTPStatus.BAD_REQUEST),
        ("/ping/nightly/start", f"token={TOKEN}", AUTH, b"", HTTPStatus.BAD_REQUEST),
        ("/ping/weekly/start", "", AUTH, b"", HTTPStatus.NOT_FOUND),
        ("/ping/nightly/begin", "", AUTH, b"", HTTPStatus.NOT_FOUND),
        ("/ping/../nightly/start", "", AUTH, b"", HTTPStatus.NOT_FOUND),
        ("/ping/nightly/start/extra", "", AUTH, b"", HTTPStatus.NOT_FOUND),
        ("/ping/night%2Fly/start", "", AUTH, b"", HTTPStatus.NOT_FOUND),
        ("/ping/nightly/start", "", AUTH, b"{not json", HTTPStatus.BAD_REQUEST),
        ("/ping/nightly/start", "", AUTH, b"[1, 2]", HTTPStatus.BAD_REQUEST),
        ("/ping/nightly/start", "", AUTH, b'{"exit_code": "3"}', HTTPStatus.BAD_REQUEST),
        ("/ping/nightly/start", "", AUTH, b'{"exit_code": true}', HTTPStatus.BAD_REQUEST),
        ("/ping/nightly/start", "", AUTH, b'{"hots": "typo"}', HTTPStatus.BAD_REQUEST),
        (
            "/ping/nightly/start",
            "",
            AUTH,
            json.dumps({"host": "h" * 256}).encode(),
            HTTPStatus.BAD_REQUEST,
        ),
        ("/ping/nightly/start", "", AUTH, b"\xff\xfe", HTTPStatus.BAD_REQUEST),
        (
            "/ping/nightly/start",
            "",
            AUTH,
            b" " * (MAX_BODY + 1),
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
        ),
    ],
)
def test_a_bad_ping_gets_a_clear_4xx_and_changes_nothing(
    receiver: PingReceiver,
    path: str,
    query: str,
    headers: dict[str, str],
    body: bytes,
    status: HTTPStatus,
) -> None:
    response = receiver.handle(path, query, headers, body)
    assert response.status is status
    assert response.body["ok"] is False and response.body["error"]
    assert TOKEN not in json.dumps(response.body)
    assert receiver.store.runs("nightly", SINCE) == []


def test_pings_are_refused_when_no_token_is_configured(tmp_path: Path) -> None:
    store = SqliteJobStore(tmp_path / "jobs.sqlite3")
    open_door = PingReceiver(jobs={"nightly"}, token=None, store=store)
    assert open_door.handle("/ping/nightly/start", "", {}, b"").status is HTTPStatus.FORBIDDEN
    store.close()


class PingRecorder:
    """A stand-in for lockwatch's ping endpoint that records what it receives."""

    def __init__(self) -> None:
        received: list[dict[str, Any]] = []
        self.received = received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                received.append(
                    {
                        "path": self.path,
                        "token": self.headers.get("X-Lockwatch-Token"),
                        "body": json.loads(self.rfile.read(length)),
                    }
                )
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"ok": true}')

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def lockwatch_exec(url: str, *command: str, run_key: str | None = None) -> subprocess.Popen[str]:
    args = [sys.executable, "-m", "lockwatch", "exec", "--job", "nightly", "--url", url]
    if run_key:
        args += ["--run-key", run_key]
    return subprocess.Popen(
        [*args, "--", *command],
        env={"LOCKWATCH_PING_TOKEN": TOKEN, "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_exec_pings_start_and_fail_and_exits_with_the_commands_code() -> None:
    recorder = PingRecorder()
    try:
        wrapper = lockwatch_exec(
            recorder.url, "sh", "-c", "echo working $$; exit 3", run_key="2026-11-29"
        )
        out, err = wrapper.communicate(timeout=60)
    finally:
        recorder.close()
    assert wrapper.returncode == 3
    assert [ping["path"] for ping in recorder.received] == [
        "/ping/nightly/start",
        "/ping/nightly/fail",
    ]
    start, fail = (ping["body"] for ping in recorder.received)
    # The start names the command's own process (the shell that echoed its $$).
    assert out == f"working {start['pid']}\n"
    assert start["host"] == socket.gethostname()
    assert start["run_key"] == "2026-11-29" and fail["run_id"] == start["run_id"]
    assert fail["exit_code"] == 3 and fail["duration"] >= 0
    assert all(ping["token"] == TOKEN for ping in recorder.received)
    assert TOKEN not in err


def test_exec_runs_the_command_while_lockwatch_hangs_and_says_so(tmp_path: Path) -> None:
    hung = Blackhole()
    marker, release = tmp_path / "started", tmp_path / "release"
    try:
        wrapper = lockwatch_exec(
            hung.url.rsplit("/", 1)[0],
            "sh",
            "-c",
            f"touch {marker}; while [ ! -e {release} ]; do sleep 0.05; done",
        )
        # The command is running although lockwatch has not answered the start ping.
        wait_until(marker.exists, message="the command started")
        assert wrapper.poll() is None
        release.touch()
        _, err = wrapper.communicate(timeout=60)
    finally:
        hung.close()
    assert wrapper.returncode == 0
    assert "start ping not delivered" in err
    assert TOKEN not in err


def test_exec_reports_a_missing_command_as_127() -> None:
    recorder = PingRecorder()
    try:
        wrapper = lockwatch_exec(recorder.url, "/nonexistent/report.sh")
        _, err = wrapper.communicate(timeout=60)
    finally:
        recorder.close()
    assert wrapper.returncode == 127
    assert "command not found" in err
    assert recorder.received[-1]["body"]["exit_code"] == 127


@pytest.fixture
def ping_server(receiver: PingReceiver) -> Iterator[str]:
    board = Board()
    server = HttpServer(board, Metrics(board), "127.0.0.1:0", 60.0)
    server.pings = receiver
    server.start()
    host, port = server.address
    yield f"http://{host}:{port}"
    server.stop()


def test_pings_over_http_record_runs_and_refuse_bad_requests(
    ping_server: str, receiver: PingReceiver
) -> None:
    ok = requests.post(
        f"{ping_server}/ping/nightly/start", json={"host": "app-1"}, headers=AUTH, timeout=5
    )
    assert ok.status_code == 200 and ok.json()["ok"] is True
    refused = {
        "no token": requests.post(f"{ping_server}/ping/nightly/start", timeout=5),
        "token in url": requests.post(f"{ping_server}/ping/nightly/start?token={TOKEN}", timeout=5),
        "unknown job": requests.post(f"{ping_server}/ping/weekly/start", headers=AUTH, timeout=5),
        "dot dot": requests.post(f"{ping_server}/ping/%2E%2E/start", headers=AUTH, timeout=5),
        "broken json": requests.post(
            f"{ping_server}/ping/nightly/fail", data=b"{", headers=AUTH, timeout=5
        ),
        "get": requests.get(f"{ping_server}/ping/nightly/start", headers=AUTH, timeout=5),
    }
    assert {name: r.status_code for name, r in refused.items()} == {
        "no token": 401,
        "token in url": 400,
        "unknown job": 404,
        "dot dot": 404,
        "broken json": 400,
        "get": 404,
    }
    assert len(receiver.store.runs("nightly", SINCE)) == 1


def test_an_oversized_ping_is_refused_before_its_body_is_read(ping_server: str) -> None:
    host, port = ping_server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        # Announce 100 MB and send none of it: the answer must come at once.
        raw.sendall(
            b"POST /ping/nightly/start HTTP/1.1\r\nHost: x\r\n"
            + f"{TOKEN_HEADER}: {TOKEN}\r\nContent-Length: 100000000\r\n\r\n".encode()
        )
        answer = raw.recv(4096).decode()
    assert answer.startswith("HTTP/1.0 413") or answer.startswith("HTTP/1.1 413")

"""POST /ping bodies however a client frames them: chunked, with a length it does
not keep, with a transfer coding nobody can read."""

from __future__ import annotations

import secrets
import socket
from pathlib import Path

import pytest
import requests

from lockwatch.publish.pings import TOKEN_HEADER
from tests.battery.conftest import Record
from tests.fixtures.postgres import PgDatabase, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config

pytestmark = [pytest.mark.pg, pytest.mark.slow]


def chunked(body: bytes, size: int = 7) -> bytes:
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def exchange(port: int, head: str, body: bytes, *, half_close: bool = False) -> int:
    """One raw request; the status of its answer (0: none)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(head.encode() + b"\r\n" + body)
        if half_close:
            conn.shutdown(socket.SHUT_WR)
        answer = conn.recv(4096)
    return int(answer.split()[1]) if answer else 0


def test_ping_bodies_are_read_however_framed_or_refused_never_ignored(
    tmp_path: Path, battery_db: PgDatabase, battery: Record
) -> None:
    token = "ping-" + secrets.token_hex(12)
    (tmp_path / "ping-token").write_text(token + "\n")
    port = free_port()
    config = write_config(tmp_path, port, {"main": battery_db.monitor_dsn})
    with config.open("a") as extra:
        extra.write(
            f"pings: {{token_file: {tmp_path / 'ping-token'}}}\n"
            "jobs:\n  - {name: nightly, target: main}\n"
        )
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    head = f"POST /ping/nightly/start HTTP/1.1\r\nHost: x\r\n{TOKEN_HEADER}: {token}\r\n"
    good = b'{"host": "app-7", "run_key": "2026-12-01"}'

    def starts() -> int:
        (target,) = requests.get(f"{lockwatch.base}/api/v1/jobs", timeout=5).json()["targets"]
        return int(target["jobs"][0]["starts_total"])

    try:
        lockwatch.start()
        wait_until(lambda: lockwatch.metric("lockwatch_polls_total", target="main"))
        refused = {
            "chunked broken JSON": exchange(
                port, head + "Transfer-Encoding: chunked\r\n", chunked(b"{")
            ),
            "chunked unknown field": exchange(
                port, head + "Transfer-Encoding: chunked\r\n", chunked(b'{"hots": "x"}')
            ),
            "bad chunk size": exchange(
                port, head + "Transfer-Encoding: chunked\r\n", b"zz\r\n{}\r\n0\r\n\r\n"
            ),
            "gzip coding": exchange(
                port, head + "Transfer-Encoding: gzip, chunked\r\n", chunked(b"\x1f\x8b")
            ),
            "length and chunked": exchange(
                port,
                head + "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n",
                chunked(good),
            ),
            "short of its length": exchange(
                port, head + f"Content-Length: {len(good) + 20}\r\n", good, half_close=True
            ),
        }
        read = exchange(port, head + "Transfer-Encoding: chunked\r\n", chunked(good))
        # Runs reach the API with the polls that follow; the good one is the last.
        wait_until(lambda: starts() or None, message="the chunked run recorded")
        polls = lockwatch.metric("lockwatch_polls_total", target="main") or 0
        wait_until(
            lambda: (lockwatch.metric("lockwatch_polls_total", target="main") or 0) > polls + 1
        )
        after_good = starts()
        after_refused = after_good - 1  # the good one is the last
    finally:
        stopped = lockwatch.stop() if lockwatch.proc is not None else 0
    assert stopped == 0, lockwatch.log(whole=True)
    assert all(400 <= status < 600 for status in refused.values()), refused
    assert after_refused == 0, f"{after_refused} runs recorded from refused bodies: {refused}"
    assert read == 200 and after_good == 1, (read, after_good)
    battery(
        "ping-framing",
        injected=(
            f"{len(refused)} POST /ping bodies framed oddly: "
            + ", ".join(refused)
            + "; then a good body sent chunked"
        ),
        did="answered "
        + ", ".join(str(s) for s in refused.values())
        + "; the chunked good one 200",
        intact=(
            f"yes: {after_refused} runs recorded from the refused ones, 1 from the chunked "
            "good one (before: a chunked body was taken as empty, a run recorded anyway)"
        ),
    )

"""Receivers that trickle their answer one byte at a time, so that every read
comes within its timeout: a notification channel and ``lockwatch exec``'s
pings must still give up at their total deadline."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lockwatch.commands.exec import PING_DEADLINE
from tests.battery.conftest import Record
from tests.fixtures.postgres import PgDatabase, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config
from tests.fixtures.standins import ChatStandin, add_telegram
from tests.fixtures.trickle import Trickler

pytestmark = [pytest.mark.pg, pytest.mark.slow]

PAUSE = 0.2  # seconds between two bytes of the answer: each read well inside 1 s


def _closed_early(trickler: Trickler, calls: int) -> bool:
    done = trickler.calls[:calls]
    return len(done) == calls and all(call.ended.is_set() for call in done)


def test_a_trickling_receiver_holds_a_channel_no_longer_than_its_deadline(
    tmp_path: Path, battery_db: PgDatabase, battery: Record
) -> None:
    port = free_port()
    config = write_config(tmp_path, port, {"main": battery_db.monitor_dsn})
    with Trickler(PAUSE) as trickler:
        # add_telegram's connect and read timeouts are 1 s each: a 2 s deadline.
        add_telegram(config, ChatStandin(), api_url=trickler.url)
        lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
        holder = battery_db.connect("nightly-report")
        try:
            lockwatch.start()
            holder.execute("SELECT pg_advisory_lock(11)")
            # The whole answer would take minutes; the channel must let go long before.
            wait_until(
                lambda: _closed_early(trickler, 2),
                timeout=trickler.whole_answer_seconds / 10,
                message="two attempts ended by lockwatch",
            )
            log = lockwatch.log()
        finally:
            stopped = lockwatch.stop() if lockwatch.proc is not None else 0
    assert stopped == 0, lockwatch.log(whole=True)
    first = trickler.calls[0]
    assert b"sendMessage" in first.request, first.request[:200]
    assert first.closed_by_client, "the receiver finished its answer"
    assert first.sent < len(trickler.answer), first.sent
    said = [line for line in log.splitlines() if "did not answer whole within 2s" in line]
    assert said, log
    battery(
        "receiver-trickle",
        injected=(
            f"a Telegram receiver that reads the request, then answers one byte every "
            f"{PAUSE:g} s ({len(trickler.answer)} bytes, {trickler.whole_answer_seconds:.0f} s "
            "in all); connect_timeout and read_timeout 1 s"
        ),
        did=(
            f"each attempt cut at the 2 s deadline, after {first.sent} bytes of the answer, "
            "logged 'did not answer whole within 2s ... it may have been delivered', retried "
            "as unanswered"
        ),
        intact=(
            f"yes: {len(trickler.calls)} attempts, none held the channel past its deadline; "
            "before, one attempt held it for the whole trickle"
        ),
    )


def test_lockwatch_exec_exits_soon_after_its_command_against_a_trickling_endpoint(
    tmp_path: Path, battery: Record
) -> None:
    with Trickler(PAUSE) as trickler:
        args = [sys.executable, "-m", "lockwatch", "exec", "--job", "nightly"]
        args += ["--url", trickler.url, "--", sys.executable, "-c", "pass"]
        started = time.monotonic()
        # Old code waited for both whole answers (minutes): the timeout fails it.
        done = subprocess.run(
            args,
            env={**os.environ, "LOCKWATCH_PING_TOKEN": "t0ken"},
            capture_output=True,
            text=True,
            timeout=trickler.whole_answer_seconds / 10,
            check=False,
        )
        took = time.monotonic() - started
        wait_until(lambda: _closed_early(trickler, 2), message="both pings ended")
    assert done.returncode == 0, done.stderr
    paths = [call.request.split(b" ", 2)[1] for call in trickler.calls]
    assert paths == [b"/ping/nightly/start", b"/ping/nightly/success"], paths
    assert all(call.closed_by_client for call in trickler.calls)
    gave_up = [line for line in done.stderr.splitlines() if "not answered whole" in line]
    assert len(gave_up) == 2, done.stderr
    battery(
        "exec-trickle",
        injected=(
            f"`lockwatch exec -- python -c pass` against an endpoint answering each ping one "
            f"byte every {PAUSE:g} s ({trickler.whole_answer_seconds:.0f} s per answer)"
        ),
        did=(
            f"each ping given up at its {PING_DEADLINE:g} s deadline and said on stderr; "
            f"the wrapper exited {took:.1f} s after starting (start ping, then finish ping)"
        ),
        intact="yes: exit code 0 (the command's), start before finish, 2 pings sent",
    )

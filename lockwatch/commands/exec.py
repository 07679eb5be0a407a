"""``lockwatch exec``: wrap a cron command so that lockwatch sees every run.

The command always runs on time: the start ping goes out beside it, not
before it, with the command's process id and the host, so that a run that
goes on too long can be looked at where it runs (``py-spy dump --pid``), and every ping has short connect and read timeouts and a total
deadline (an endpoint may trickle its answer in reads that each come in time). If lockwatch
is unreachable the wrapper says so on stderr and the command is unaffected;
the wrapper exits with the command's own exit code.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import click
import requests

from lockwatch.commands.params import daemon_url
from lockwatch.publish.pings import TOKEN_HEADER
from lockwatch.util.deadline import within
from lockwatch.util.http_session import deadline_session
from lockwatch.util.secrets import redact

PING_TIMEOUT = (2.0, 5.0)  # connect, read
PING_DEADLINE = sum(PING_TIMEOUT)  # the whole ping, connecting to the answer's last byte
EXIT_NOT_FOUND = 127
EXIT_NOT_EXECUTABLE = 126


@dataclass(frozen=True, slots=True)
class PingClient:
    url: str  # lockwatch's base URL, e.g. http://127.0.0.1:10057
    token: str
    job: str
    stderr: TextIO

    def send(self, event: str, payload: dict[str, object]) -> None:
        with deadline_session() as session, within(PING_DEADLINE) as deadline:
            try:
                response = session.post(
                    f"{self.url.rstrip('/')}/ping/{self.job}/{event}",
                    json=payload,
                    headers={TOKEN_HEADER: self.token},
                    timeout=PING_TIMEOUT,
                )
            except requests.RequestException as exc:
                if not deadline.expired:
                    self._warn(f"{event} ping not delivered: {type(exc).__name__}: {exc}")
                    return
        if deadline.expired:
            self._warn(f"{event} ping not answered whole within {PING_DEADLINE:g}s: given up")
            return
        if response.status_code >= 400:
            try:
                reason = str(response.json().get("error"))
            except ValueError:
                reason = response.text[:200]
            self._warn(f"{event} ping refused ({response.status_code}): {reason}")

    def _warn(self, message: str) -> None:
        print(f"lockwatch exec: {redact(message, (self.token,))}", file=self.stderr, flush=True)


def _exit_code(returncode: int) -> int:
    """A child killed by a signal exits like the shell reports it: 128 + signal."""
    return 128 - returncode if returncode < 0 else returncode


def _spawn(command: Sequence[str], stderr: TextIO) -> tuple[subprocess.Popen[bytes] | None, int]:
    """The command started, or why it could not be, as the shell's exit code."""
    try:
        return subprocess.Popen(list(command)), 0
    except FileNotFoundError:
        print(f"lockwatch exec: command not found: {command[0]}", file=stderr, flush=True)
        return None, EXIT_NOT_FOUND
    except PermissionError:
        print(f"lockwatch exec: command not executable: {command[0]}", file=stderr, flush=True)
        return None, EXIT_NOT_EXECUTABLE


def _wait(child: subprocess.Popen[bytes]) -> int:
    """The command's exit code; cron and systemd stop the wrapper, and the
    command must hear it too."""
    forward = {
        sig: signal.signal(sig, lambda signum, _: child.send_signal(signum))
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    }
    try:
        return _exit_code(child.wait())
    finally:
        for sig, handler in forward.items():
            signal.signal(sig, handler)


def run_wrapped(
    command: Sequence[str],
    *,
    client: PingClient,
    run_key: str | None = None,
    host: str | None = None,
) -> int:
    host = host or socket.gethostname()
    run_id = uuid.uuid4().hex
    start_payload: dict[str, object] = {"run_id": run_id, "host": host}
    if run_key:
        start_payload["run_key"] = run_key
    started = time.monotonic()
    child, code = _spawn(command, client.stderr)
    if child is not None:
        start_payload["pid"] = child.pid
    # Sent once the command runs, so that it names its process; never waited for.
    start_ping = threading.Thread(target=client.send, args=("start", start_payload), daemon=True)
    start_ping.start()
    if child is not None:
        code = _wait(child)
    duration = round(time.monotonic() - started, 3)
    # The finish must follow the start, which gives up by its own deadline.
    start_ping.join()
    finish_payload: dict[str, object] = {**start_payload, "exit_code": code, "duration": duration}
    client.send("success" if code == 0 else "fail", finish_payload)
    return code


@click.command("exec", context_settings={"ignore_unknown_options": True})
@click.option("--job", required=True, help="The job's name, as configured under jobs.")
@click.option(
    "--run-key", default=None, help="What makes two runs the same run (default: the schedule slot)."
)
@daemon_url("lockwatch's address (or set LOCKWATCH_URL).")
@click.option(
    "--token-file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="File holding the ping token (or set LOCKWATCH_PING_TOKEN).",
)
@click.option("--host", default=None, help="The host name to report [default: this host's name].")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def exec_command(
    job: str,
    run_key: str | None,
    url: str,
    token_file: Path | None,
    host: str | None,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND and report its start and its end to lockwatch: lockwatch exec --job nightly -- ./report.sh"""
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise click.BadParameter(
                f"cannot read {token_file}: {exc.strerror}", param_hint="--token-file"
            ) from None
    else:
        token = os.environ.get("LOCKWATCH_PING_TOKEN", "")
    if not token:
        raise click.UsageError("no ping token: give --token-file or set LOCKWATCH_PING_TOKEN")
    client = PingClient(url=url, token=token, job=job, stderr=sys.stderr)
    sys.exit(run_wrapped(command, client=client, run_key=run_key, host=host))

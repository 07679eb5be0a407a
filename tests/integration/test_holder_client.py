"""The holder's client, findable (issue 24, defect 5): evidence, snapshot,
status page and messages gave the backend's pid, application and address,
but not the client's TCP port, the only way to tell one worker process among
several on a host (``ss -tnp 'sport = :PORT'``), nor the client's host name
where the server resolves it. Ground truth: the holding connection's own
socket, and the resolver's name for its address."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests

from lockwatch.demo.pgbinaries import embedded_bin_dir
from lockwatch.demo.pgcluster import LocalCluster
from tests.fixtures.paths import ROOT
from tests.fixtures.postgres import MONITOR_PASSWORD, MONITOR_USER, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config
from tests.fixtures.standins import ChatStandin, add_telegram

pytestmark = [pytest.mark.pg, pytest.mark.slow]


@pytest.fixture(scope="module")
def server() -> Iterator[LocalCluster]:
    """A server that resolves its clients' addresses (log_hostname), as some do."""
    with LocalCluster(embedded_bin_dir(), settings={"log_hostname": "on"}) as cluster:
        cluster.create_password_role(MONITOR_USER, MONITOR_PASSWORD, "pg_monitor")
        yield cluster


def local_port(conn: psycopg.Connection[Any]) -> int:
    """The client's end of a connection, as the client's host knows it."""
    with socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:
        return int(sock.getsockname()[1])


def test_the_holders_client_port_and_host_name_are_in_every_account_of_it(
    server: LocalCluster, tmp_path: Path, standin: ChatStandin
) -> None:
    holder = psycopg.connect(server.dsn(), application_name="webhook-worker-4", autocommit=True)
    holder.execute("SELECT pg_advisory_lock(42)")
    port, host = local_port(holder), socket.gethostbyaddr("127.0.0.1")[0]
    where = f"127.0.0.1:{port} ({host})"
    monitor = server.dsn(user=MONITOR_USER, password=MONITOR_PASSWORD)
    listen = free_port()
    config = write_config(tmp_path, listen, {"main": monitor}, locks="{max_hold: 1s}")
    add_telegram(config, standin)
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", listen)
    lockwatch.start()
    try:
        found = wait_until(lambda: lockwatch.finding("lock_held_too_long", "main"), timeout=60)
        (facts,) = found["evidence"]["holders"]
        assert (facts["client_addr"], facts["client_port"]) == ("127.0.0.1", port)
        assert facts["client_hostname"] == host
        assert where in found["summary"]

        incident = requests.get(f"{lockwatch.base}/api/v1/incidents/{found['incident']}", timeout=5)
        root = incident.json()["incident"]["root"]
        assert (root["client_port"], root["client_hostname"]) == (port, host)
        page = requests.get(f"{lockwatch.base}/", timeout=5).text
        assert where in page and f"<td>{port}</td>" in page

        message = wait_until(lambda: standin.delivered("telegram"), timeout=60)[0].text
        assert f"root: pid {holder.info.backend_pid} · webhook-worker-4 · {where}" in message

        shown = subprocess.run(
            [sys.executable, "-m", "lockwatch", "snapshot", "--dsn", monitor],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            check=False,
        )
        assert f"webhook-worker-4 from {where}" in shown.stdout, shown.stdout
    finally:
        lockwatch.stop()
        holder.close()

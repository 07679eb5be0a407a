"""``lockwatch doctor`` says how long an orphan lives on the server it checks:
two servers with different keepalive and timeout settings, two answers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from lockwatch.cli import main
from lockwatch.demo.pgbinaries import embedded_bin_dir
from lockwatch.demo.pgcluster import LocalCluster
from lockwatch.text import format_duration
from tests.fixtures.postgres import MONITOR_PASSWORD, MONITOR_USER, PgDatabase

pytestmark = pytest.mark.pg

SHORT = {
    "tcp_keepalives_idle": "20",
    "tcp_keepalives_interval": "5",
    "tcp_keepalives_count": "2",
    "idle_session_timeout": "15s",
    "idle_in_transaction_session_timeout": "5min",
}


def kernel_keepalive() -> float:
    """What the kernel gives up on a silent peer after, as the server inherits it."""
    proc = Path("/proc/sys/net/ipv4")
    idle, interval, probes = (
        int((proc / name).read_text())
        for name in ("tcp_keepalive_time", "tcp_keepalive_intvl", "tcp_keepalive_probes")
    )
    return idle + interval * probes


@pytest.fixture(scope="module")
def short_timeouts() -> Iterator[LocalCluster]:
    with LocalCluster(embedded_bin_dir(), settings=SHORT) as server:
        server.create_password_role(MONITOR_USER, MONITOR_PASSWORD, "pg_monitor")
        yield server


def doctor(dsn: str) -> list[str]:
    result = CliRunner().invoke(main, ["doctor", "--dsn", dsn])
    assert result.exit_code == 0, result.output
    assert MONITOR_PASSWORD not in result.output
    return [line.strip() for line in result.output.splitlines()]


def test_a_server_on_the_kernels_keepalive_keeps_an_orphan_for_its_keepalive(
    pg: PgDatabase,
) -> None:
    lines = doctor(pg.monitor_dsn)
    (line,) = [line for line in lines if line.startswith("orphan lifetime")]
    assert line.startswith(f"orphan lifetime     up to {format_duration(kernel_keepalive())},")
    assert "ended by TCP keepalive" in line
    assert any(line.startswith("shorten it with     tcp_keepalives_idle = 60") for line in lines)


def test_a_server_with_short_timeouts_ends_an_orphan_by_them(
    short_timeouts: LocalCluster,
) -> None:
    lines = doctor(short_timeouts.dsn(user=MONITOR_USER, password=MONITOR_PASSWORD))
    (line,) = [line for line in lines if line.startswith("orphan lifetime")]
    assert line == (
        "orphan lifetime     idle: up to 15s, ended by idle_session_timeout; "
        "idle in a transaction: up to 30s, ended by TCP keepalive (20s idle + 2 probes x 5s = 30s)"
    )
    assert not any("tcp_keepalives_idle" in line for line in lines)

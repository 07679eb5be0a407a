"""``lockwatch doctor`` says how long an orphan lives on the server it checks:
two servers with different keepalive and timeout settings, two answers; and
on a third, whose roles set their own, the answer for each role, never
lockwatch's own session's settings."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from lockwatch.cli import main
from lockwatch.demo.pgbinaries import debian_bin_dirs, embedded_bin_dir
from lockwatch.demo.pgcluster import LocalCluster
from lockwatch.detect.keepalive import orphan_lifetime, timeouts_for
from lockwatch.sample.keepalive import server_settings
from lockwatch.sample.session import TargetSession
from lockwatch.text import format_duration
from tests.fixtures.postgres import DEBIAN_VERSION, MONITOR_PASSWORD, MONITOR_USER, PgDatabase

pytestmark = pytest.mark.pg

SHORT = {
    "tcp_keepalives_idle": "20",
    "tcp_keepalives_interval": "5",
    "tcp_keepalives_count": "2",
    "idle_session_timeout": "15s",
    "idle_in_transaction_session_timeout": "5min",
}


# The venv's bin first: ``lockwatch`` as the README installs it.
BIN_PATH = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"


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


@pytest.fixture(scope="module")
def role_settings() -> Iterator[LocalCluster]:
    """Debian's PostgreSQL 15 with the server's idle_in_transaction_session_timeout
    off, one application role with its own, and lockwatch's role with its own."""
    bin_dir = debian_bin_dirs().get(DEBIAN_VERSION)
    assert bin_dir is not None, "scripts/bootstrap installs Debian's PostgreSQL 15"
    with LocalCluster(bin_dir) as server:
        server.create_password_role(MONITOR_USER, MONITOR_PASSWORD, "pg_monitor")
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            admin.execute("CREATE ROLE app LOGIN")
            admin.execute("CREATE ROLE batch LOGIN")
            admin.execute("ALTER ROLE batch SET idle_in_transaction_session_timeout = '45s'")
            admin.execute("ALTER ROLE batch IN DATABASE postgres SET idle_session_timeout = 90000")
        yield server


def test_lockwatchs_own_session_timeouts_are_never_read_as_the_servers(
    role_settings: LocalCluster,
) -> None:
    session = TargetSession(
        role_settings.dsn(user=MONITOR_USER, password=MONITOR_PASSWORD), statement_timeout=5.0
    )
    session.connect()
    try:
        with session.step() as conn:
            own = conn.execute(
                "SELECT current_setting('idle_in_transaction_session_timeout') AS own"
            ).fetchone()
            settings = server_settings(conn)
    finally:
        session.close()
    assert own == {"own": "5s"}, "lockwatch sets its own on its session"
    assert settings.server.idle_in_transaction_session_timeout is None  # the server's: off
    assert settings.hidden == ()
    app = timeouts_for(settings, "app", "postgres")
    assert app.idle_in_transaction_session_timeout is None and app.set_by == ()
    batch = timeouts_for(settings, "batch", "postgres")
    assert batch.idle_in_transaction_session_timeout == 45
    assert batch.idle_session_timeout == 90
    assert dict(batch.set_by) == {
        "idle_in_transaction_session_timeout": "ALTER ROLE batch",
        "idle_session_timeout": "ALTER ROLE batch IN DATABASE postgres",
    }
    lifetime = orphan_lifetime(batch)
    assert (lifetime.idle_seconds, lifetime.idle_bound_by) == (
        90,
        "idle_session_timeout (ALTER ROLE batch IN DATABASE postgres)",
    )
    assert lifetime.in_transaction_seconds == 45


def test_doctor_judges_an_applications_dsn_for_the_application(
    role_settings: LocalCluster,
) -> None:
    """Run with an application's DSN, doctor says whether it is safe and how
    long an orphan of its role lives, asks nothing of lockwatch's of it, and
    exits 0, so that ``doctor && deploy`` works; --monitoring judges a DSN as
    lockwatch's own."""
    result = CliRunner().invoke(main, ["doctor", "--dsn", role_settings.dsn(user="batch")])
    assert result.exit_code == 0, result.output
    assert "pg_monitor" not in result.output
    lines = [line.strip() for line in result.output.splitlines()]
    (line,) = [line for line in lines if line.startswith("orphan lifetime")]
    assert line == (
        "orphan lifetime     idle: up to 1m30s, ended by idle_session_timeout (ALTER ROLE "
        "batch IN DATABASE postgres); idle in a transaction: up to 45s, ended by "
        "idle_in_transaction_session_timeout (ALTER ROLE batch)"
    )
    deploy = subprocess.run(
        ["sh", "-c", 'lockwatch doctor --dsn "$APP_DSN" >/dev/null && echo deployed'],
        env={**os.environ, "APP_DSN": role_settings.dsn(user="app"), "PATH": BIN_PATH},
        capture_output=True,
        text=True,
        check=False,
    )
    assert deploy.stdout == "deployed\n", deploy.stderr
    monitoring = CliRunner().invoke(
        main, ["doctor", "--monitoring", "--dsn", role_settings.dsn(user="app")]
    )
    assert monitoring.exit_code == 3, monitoring.output
    assert "GRANT pg_monitor TO app" in monitoring.output

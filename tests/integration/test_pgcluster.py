"""The throwaway-server harness itself, against real servers of the version matrix."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg
import pytest
from psycopg import errors

from lockwatch.demo.initdb_cache import INITDB_CACHE_ENV
from lockwatch.demo.pgbinaries import ClusterError
from lockwatch.demo.pgcluster import LocalCluster
from tests.fixtures.postgres import MONITOR_USER, PgDatabase, run_in_thread, wait_until

pytestmark = pytest.mark.pg

EXPECTED_MAJOR = {"pg18": 18, "pg15": 15}


# Set on the module's own server, on top of the harness's defaults.
OWN_SETTINGS = {"lock_timeout": "1234"}


@pytest.fixture(scope="module")
def own_server(pg_server: LocalCluster) -> Iterator[LocalCluster]:
    """A server of the same version that the module's tests may crash, restart
    or move to another port, in any order: each leaves it running (an initdb
    is most of a server's start, so they share one)."""
    with LocalCluster(pg_server.bin_dir, settings=OWN_SETTINGS) as server:
        yield server


def _server_processes(directory: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(proc.info["cmdline"] or ())
        if str(directory) in cmdline and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


def _gone(proc: psutil.Process) -> bool:
    try:
        return bool(proc.status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def test_it_serves_the_matrix_version_over_tcp_on_loopback(
    pg: PgDatabase, request: pytest.FixtureRequest
) -> None:
    conn = pg.connect()
    version_num, address, port = conn.execute(
        "SELECT current_setting('server_version_num')::int, host(inet_server_addr()),"
        " inet_server_port()"
    ).fetchone() or (None, None, None)

    assert version_num is not None
    assert version_num // 10000 == EXPECTED_MAJOR[request.node.callspec.params["pg_server"]]
    assert version_num // 10000 == pg.major_version
    assert (address, port) == ("127.0.0.1", pg.server.port)
    assert pg.server.port != 5432


def test_the_monitor_role_cannot_write(pg: PgDatabase) -> None:
    pg.connect().execute("CREATE TABLE jobs (id int)")

    with psycopg.connect(pg.monitor_dsn, autocommit=True) as monitor:
        assert monitor.execute("SELECT current_user").fetchone() == (MONITOR_USER,)
        with pytest.raises(errors.InsufficientPrivilege):
            monitor.execute("INSERT INTO jobs VALUES (1)")


def test_the_monitor_role_needs_its_password(pg: PgDatabase) -> None:
    wrong = pg.server.dsn(dbname=pg.database, user=MONITOR_USER, password="wrong")

    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(wrong)


def test_the_monitor_role_reads_the_query_text_of_other_sessions(pg: PgDatabase) -> None:
    holder = pg.connect("holder")
    holder.execute("SELECT pg_advisory_lock(42)")
    waiter = pg.connect("waiter")
    blocked = run_in_thread(lambda: waiter.execute("SELECT pg_advisory_lock(42) /* waiter */"))

    with psycopg.connect(pg.monitor_dsn, autocommit=True) as monitor:
        row = wait_until(
            lambda: monitor.execute(
                "SELECT query FROM pg_stat_activity"
                " WHERE application_name = 'waiter' AND wait_event_type = 'Lock'"
            ).fetchone(),
            message="the waiter never showed up as waiting on a lock",
        )
    assert row == ("SELECT pg_advisory_lock(42) /* waiter */",)

    holder.execute("SELECT pg_advisory_unlock(42)")
    blocked.result()


def test_kill_then_start_brings_the_server_back_on_the_same_port(own_server: LocalCluster) -> None:
    port = own_server.port
    conn = psycopg.connect(own_server.dsn(), autocommit=True)
    try:
        own_server.kill()

        assert not own_server.running
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", port)) != 0
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
    finally:
        conn.close()

    own_server.start()

    assert own_server.port == port
    with psycopg.connect(own_server.dsn()) as again:
        assert again.execute("SELECT 1").fetchone() == (1,)
    assert "not properly shut down" in own_server.log_path.read_text()


def test_restart_keeps_the_port_and_the_data(own_server: LocalCluster) -> None:
    port = own_server.port
    with psycopg.connect(own_server.dsn(), autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (id int)")

    own_server.restart()

    assert own_server.port == port
    with psycopg.connect(own_server.dsn()) as conn:
        assert conn.execute("SELECT count(*) FROM kept").fetchone() == (0,)


def test_close_leaves_no_server_process_and_removes_the_directory(
    pg_server: LocalCluster,
) -> None:
    server = LocalCluster(pg_server.bin_dir)
    server.start()
    directory = server.directory
    postmaster = _server_processes(directory)
    assert len(postmaster) == 1
    family = [postmaster[0], *postmaster[0].children()]

    server.close()
    server.close()

    assert _server_processes(directory) == []
    assert all(_gone(proc) for proc in family)
    assert not directory.exists()


def test_settings_are_applied_on_top_of_the_defaults(own_server: LocalCluster) -> None:
    with psycopg.connect(own_server.dsn()) as conn:
        shown = conn.execute(
            "SELECT current_setting('lock_timeout'), current_setting('fsync'),"
            " current_setting('max_connections'), current_setting('listen_addresses')"
        ).fetchone()

    assert shown == ("1234ms", "off", "300", "127.0.0.1")


def test_a_taken_port_makes_it_move_to_another_once(own_server: LocalCluster) -> None:
    # Stopped, so that its port is free for someone else to take before it starts.
    own_server.stop()
    with socket.socket() as squatter:
        # The connections of the tests before leave the port in TIME_WAIT, which
        # only a listener with SO_REUSEADDR may bind over (PostgreSQL's does).
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", own_server.port))
        squatter.listen()
        taken = own_server.port

        own_server.start()

    assert own_server.port != taken
    with psycopg.connect(own_server.dsn()) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_failed_start_reports_the_tail_of_the_server_log(pg_server: LocalCluster) -> None:
    server = LocalCluster(pg_server.bin_dir, settings={"max_connections": "many"})
    try:
        with pytest.raises(ClusterError, match=r"(?s)tail of .*server\.log.*max_connections"):
            server.start()
        assert not server.running
    finally:
        server.close()
    assert not server.directory.exists()


IDENTIFIER = "SELECT system_identifier FROM pg_control_system()"


def test_clusters_copy_one_initdb_from_the_cache_and_without_it_run_their_own(
    pg_server: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "initdb"  # 0700 root's when the tests run as root
    monkeypatch.setenv(INITDB_CACHE_ENV, str(cache))
    with LocalCluster(pg_server.bin_dir) as first, LocalCluster(pg_server.bin_dir) as second:
        (template,) = cache.glob("*/data")
        made = template.stat().st_mtime_ns
        # Each its own copy: what one writes the other does not see, and a
        # server of its own to lockwatch (model/servers.py).
        with psycopg.connect(first.dsn(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE only_in_first")
            first_id = conn.execute(IDENTIFIER).fetchone()
        with psycopg.connect(second.dsn()) as conn:
            found = conn.execute("SELECT count(*) FROM pg_database WHERE datname = 'only_in_first'")
            assert found.fetchone() == (0,)
            second_id = conn.execute(IDENTIFIER).fetchone()
        assert first_id is not None and second_id is not None
        assert first_id != second_id and min(first_id[0], second_id[0]) > 0
        template_id = int.from_bytes(
            (template / "global" / "pg_control").read_bytes()[:8], "little"
        )
        assert template_id not in (first_id[0], second_id[0])
    assert template.stat().st_mtime_ns == made  # copied from, never run
    assert not (template / "postmaster.pid").exists()

    monkeypatch.delenv(INITDB_CACHE_ENV)
    with LocalCluster(pg_server.bin_dir) as own:
        # initdb's own run: the data dir it made is there, and no template more.
        assert (own.directory / "data" / "PG_VERSION").read_text().strip() == str(own.major_version)
    assert len(list(cache.glob("*/data"))) == 1

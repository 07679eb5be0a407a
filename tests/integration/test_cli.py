from __future__ import annotations

import json
import socket
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from lockwatch.cli import main
from tests.fixtures.postgres import (
    MONITOR_PASSWORD,
    Background,
    PgDatabase,
    run_in_thread,
    wait_until,
)

PASSWORD = "hunter2-in-the-dsn"
PROMPTLY = 10.0  # seconds: a command that gives up must not start anything


@pytest.fixture(autouse=True)
def no_dsn_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCKWATCH_DSN", raising=False)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def invoke_promptly(*args: str) -> Result:
    """Runs the command in a thread, failing the test if it is still running
    after ``PROMPTLY`` (it started the daemon instead of refusing)."""
    return run_in_thread(lambda: invoke(*args)).result(timeout=PROMPTLY)


def write(tmp_path: Path, text: str, name: str = "lockwatch.yml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def good_config(tmp_path: Path) -> Path:
    return write(
        tmp_path,
        f"""
        targets:
          - name: main
            dsn: postgresql://mon:{PASSWORD}@127.0.0.1:6432/app
            locks:
              named:
                - {{name: webhooks, key: 42}}
        """,
    )


def bad_config(tmp_path: Path, listen: str = "127.0.0.1:10057") -> Path:
    return write(
        tmp_path,
        f"""
        listen: "{listen}"
        targets:
          - name: main
            dsn: postgresql://mon:{PASSWORD}@127.0.0.1:6432/app
            interval: 5 minutes
            locks:
              max_hold: -3s
              named:
                - {{name: webhooks, key: forty-two}}
        """,
        name="bad.yml",
    )


# -- check-config ----------------------------------------------------------------


def test_check_config_accepts_a_valid_file_with_one_line(tmp_path: Path) -> None:
    path = good_config(tmp_path)
    result = invoke("check-config", str(path))
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [f"{path}: ok (1 target(s), 1 named lock(s))"]
    assert PASSWORD not in result.output


def test_check_config_reports_every_problem_with_file_line_and_path(tmp_path: Path) -> None:
    path = bad_config(tmp_path, listen="localhost")
    result = invoke("check-config", str(path))
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"{path}:1: listen: not host:port: 'localhost' (e.g. 127.0.0.1:10057 or [::1]:10057)",
        f"{path}:5: targets[0].interval: not a duration: '5 minutes' (use 500ms, 5s, 2m, 1h)",
        f"{path}:7: targets[0].locks.max_hold: negative duration: '-3s'",
        f"{path}:9: targets[0].locks.named[0].key: not an advisory lock key: 'forty-two'",
    ]
    assert PASSWORD not in result.output


def test_check_config_suggests_serverless_for_a_neon_host_not_marked_so(tmp_path: Path) -> None:
    neon = f"postgresql://mon:{PASSWORD}@ep-cool-1.us-east-2.aws.neon.tech/app"
    path = write(
        tmp_path,
        f"""
        targets:
          - {{name: neon, dsn: "{neon}"}}
          - {{name: sleepy, dsn: "{neon}", serverless: true, sleep: {{after: 2m, interval: 30m}}}}
        """,
        name="neon.yml",
    )
    result = invoke("check-config", str(path))
    assert result.exit_code == 0, result.output
    (note,) = [line for line in result.stdout.splitlines() if "Neon's" in line]
    assert note.startswith(f"{path}: note: target neon: its host is Neon's")
    assert "`serverless: true`" in note
    assert PASSWORD not in result.output


def test_check_config_says_which_target_judges_the_locks_of_which_database_of_one_server(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        f"""
        targets:
          - {{name: app, dsn: "postgresql://mon:{PASSWORD}@localhost:5432/app"}}
          - {{name: app2, dsn: "postgresql://mon:{PASSWORD}@127.0.0.1/app2"}}
        """,
    )
    result = invoke("check-config", str(path))
    assert result.exit_code == 0, result.output
    (note,) = [line for line in result.stdout.splitlines() if "note:" in line]
    assert f"{path}: note: targets app, app2 read one server (loopback:5432)" in note
    assert "(app judges database app; app2 judges database app2)" in note
    assert PASSWORD not in result.output


def test_check_config_of_a_missing_file_exits_2(tmp_path: Path) -> None:
    result = invoke("check-config", str(tmp_path / "nowhere.yml"))
    assert result.exit_code == 2
    assert "nowhere.yml" in result.stderr
    assert "cannot read the config file" in result.stderr


# -- run refusing to start -----------------------------------------------------------


def test_run_with_a_bad_duration_flag_exits_2_and_says_how_to_write_one() -> None:
    result = invoke_promptly(
        "run", "--dsn", f"postgresql://mon:{PASSWORD}@127.0.0.1:1/app", "--max-hold", "5minutes"
    )
    assert result.exit_code == 2
    assert "--max-hold" in result.stderr
    assert "not a duration: '5minutes' (use 500ms, 5s, 2m, 1h)" in result.stderr
    assert PASSWORD not in result.output


def test_run_with_a_config_file_and_lock_flags_exits_2(tmp_path: Path) -> None:
    result = invoke_promptly("run", "-c", str(good_config(tmp_path)), "--max-hold", "5m")
    assert result.exit_code == 2
    assert "lock flags go in the config file" in result.stderr


def test_run_without_a_config_file_or_a_dsn_exits_2() -> None:
    result = invoke_promptly("run")
    assert result.exit_code == 2
    assert "give a config file (-c lockwatch.yml) or a database (--dsn DSN)" in result.stderr


def test_run_with_a_bad_dsn_flag_exits_2_without_echoing_it() -> None:
    result = invoke_promptly("run", "--dsn", f"postgresql://mon:{PASSWORD}@[::1/app")
    assert result.exit_code == 2
    assert "--dsn" in result.stderr
    assert PASSWORD not in result.output


@pytest.fixture
def held_port() -> Iterator[int]:
    """A loopback port this test listens on, so a daemon that started would fail to bind."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_run_with_a_bad_config_file_exits_2_before_starting_anything(
    tmp_path: Path, held_port: int
) -> None:
    path = bad_config(tmp_path, listen=f"127.0.0.1:{held_port}")
    result = invoke_promptly("run", "-c", str(path))
    assert result.exit_code == 2
    # the same report as check-config, and nothing from a daemon that tried to listen
    assert result.stderr == invoke("check-config", str(path)).stderr
    assert "Address already in use" not in result.output
    assert PASSWORD not in result.output


def test_run_with_a_config_file_and_a_bad_listen_flag_exits_2(tmp_path: Path) -> None:
    result = invoke_promptly("run", "-c", str(good_config(tmp_path)), "--listen", "localhost")
    assert result.exit_code == 2
    assert "--listen" in result.stderr


# -- snapshot against a real server ----------------------------------------------------


@dataclass
class Convoy:
    holder_pid: int
    waiter_pid: int
    waiter: Background[Any]


@pytest.fixture
def convoy(pg: PgDatabase) -> Iterator[Convoy]:
    """One session holds pg_advisory_lock(42), another waits for it."""
    holder = pg.connect(application_name="webhook-worker-1")
    holder.execute("SELECT pg_advisory_lock(42)")
    queued = pg.connect(application_name="webhook-worker-2")
    waiter_pid = queued.info.backend_pid
    waiter = run_in_thread(lambda: queued.execute("SELECT pg_advisory_lock(42)").fetchone())
    with pg.connect(application_name="test-observer") as observer:
        wait_until(
            lambda: observer.execute(
                "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND pid = %s",
                (waiter_pid,),
            ).fetchone(),
            message="the second session never queued on lock 42",
        )
    yield Convoy(holder.info.backend_pid, waiter_pid, waiter)
    holder.execute("SELECT pg_advisory_unlock(42)")
    waiter.result()


def test_snapshot_shows_the_holder_the_waiter_and_the_chain(pg: PgDatabase, convoy: Convoy) -> None:
    result = invoke("snapshot", "--dsn", pg.monitor_dsn)
    assert result.exit_code == 0, result.output  # nothing past a default budget yet
    out = result.stdout
    assert "1 advisory lock(s) held by 1 session(s), 1 waiting" in out
    assert f"pid {convoy.holder_pid} webhook-worker-1 from " in out
    assert f"  holds 1 key(s) in database {pg.database}: 42" in out
    assert "  lock 42: 1 session(s) waiting, longest " in out
    assert f"    pid {convoy.waiter_pid} webhook-worker-2 from " in out
    assert (
        f"    chain {convoy.waiter_pid} (active, waits on advisory) -> {convoy.holder_pid} (idle)"
        in out
    )
    assert out.rstrip().endswith("no problems seen")
    assert MONITOR_PASSWORD not in result.output


def test_snapshot_json_is_valid_json_with_the_lock(pg: PgDatabase, convoy: Convoy) -> None:
    result = invoke("snapshot", "--json", "--dsn", pg.monitor_dsn)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["findings"] == []
    assert MONITOR_PASSWORD not in result.output
    (target,) = json.loads(result.stdout)["targets"]
    assert target["up"] is True
    (lock,) = target["locks"]
    assert (lock["database"], lock["key"], lock["waiter_count"]) == (pg.database, "42", 1)
    (holder,) = lock["holders"]
    assert (holder["pid"], holder["application_name"]) == (convoy.holder_pid, "webhook-worker-1")
    (waiter,) = lock["waiters"]
    assert (waiter["pid"], waiter["blocked_by"]) == (convoy.waiter_pid, [convoy.holder_pid])


def test_snapshot_of_a_closed_port_exits_1_without_the_password() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]  # bound but not listening: connections are refused
        result = invoke(
            "snapshot", "--dsn", f"postgresql://mon:{MONITOR_PASSWORD}@127.0.0.1:{closed}/app"
        )
    assert result.exit_code == 1
    assert result.stderr.startswith(f"lockwatch: mon@127.0.0.1:{closed}/app: ")
    assert "Connection refused" in result.stderr
    assert MONITOR_PASSWORD not in result.output


def test_run_with_a_config_file_and_a_dsn_flag_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["run", "-c", str(good_config(tmp_path)), "--dsn", "postgresql://127.0.0.1:1/x"]
    )
    assert result.exit_code == 2
    assert "--dsn and -c/--config exclude each other" in result.stderr

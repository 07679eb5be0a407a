"""``lockwatch terminate`` on a real server watched by a real daemon: it ends a
hung holder only after --yes, refuses a pid that went to another backend
between the look and the act, a resolved incident, a role that cannot see the
session and a role without pg_signal_backend, and each outcome shows on the
incident's timeline as the daemon serves it.

The server runs in a PID namespace of its own (``tests/fixtures/pidns.py``) so
that a pid is really given again to a new backend. Three targets watch it, the
same server, each with the actions role under test: ``main`` (pg_signal_backend
and pg_read_all_stats), ``blind`` (pg_signal_backend only: backend_start is
NULL to it) and ``weak`` (pg_read_all_stats only)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests
from click.testing import CliRunner
from psycopg import sql

from lockwatch.cli import main
from lockwatch.demo.pgcluster import SCRAM_GROUP, free_port
from lockwatch.model.actions import EXIT_CODES, Verdict
from tests.fixtures.pidns import PidNamespaceServer, pid_namespace_server
from tests.fixtures.postgres import (
    MONITOR_PASSWORD,
    MONITOR_USER,
    run_in_thread,
    session_alive,
    wait_until,
)
from tests.fixtures.processes import LockwatchProcess
from tests.fixtures.schema import assert_valid_incidents

pytestmark = pytest.mark.pg

ONCALL_PASSWORD = "oncall-pw-" + "7f3a9c1e"
ROLES = {  # target: the actions role's grants
    "main": ("pg_signal_backend", "pg_read_all_stats"),
    "blind": ("pg_signal_backend",),
    "weak": ("pg_read_all_stats",),
}
Session = psycopg.Connection[tuple[Any, ...]]


@pytest.fixture(scope="module")
def server() -> Iterator[PidNamespaceServer]:
    yield from pid_namespace_server({"max_prepared_transactions": "5"})


@pytest.fixture(scope="module")
def daemon(server: PidNamespaceServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("terminate")
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        for role in (MONITOR_USER, *(f"act_{name}" for name in ROLES)):
            admin.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} IN ROLE {}").format(
                    sql.Identifier(role),
                    sql.Literal(MONITOR_PASSWORD if role == MONITOR_USER else ONCALL_PASSWORD),
                    sql.Identifier(SCRAM_GROUP),
                )
            )
        admin.execute(f"GRANT pg_monitor TO {MONITOR_USER}")
        for name, grants in ROLES.items():
            admin.execute(f"GRANT {', '.join(grants)} TO act_{name}")
        admin.execute("CREATE ROLE app LOGIN")
    port = free_port()
    lines = [
        f"listen: 127.0.0.1:{port}",
        f"state_dir: {tmp / 'state'}",
        "defaults:",
        "  interval: 300ms",
        "  locks: {max_hold: 1s, orphan_after: 1h}",
        "targets:",
    ]
    for name in ROLES:
        actions = tmp / f"{name}-actions.dsn"
        actions.write_text(server.dsn(user=f"act_{name}", password=ONCALL_PASSWORD) + "\n")
        lines += [
            f"  - name: {name}",
            f"    dsn: {server.dsn(user=MONITOR_USER, password=MONITOR_PASSWORD)!r}",
            f"    actions: {{dsn_file: {actions}}}",
        ]
    config = tmp / "lockwatch.yml"
    config.write_text("\n".join(lines) + "\n")
    process = LockwatchProcess(config, tmp / "lockwatch.log", port)
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def sessions() -> Iterator[list[Session]]:
    """The test's client sessions, closed at its end (ended ones too)."""
    opened: list[Session] = []
    yield opened
    for session in opened:
        session.close()


def connect(server: PidNamespaceServer, sessions: list[Session], role: str = "app") -> Session:
    session = psycopg.connect(server.dsn(user=role), autocommit=True, application_name="worker")
    sessions.append(session)
    return session


def holder(server: PidNamespaceServer, sessions: list[Session], key: int) -> Session:
    """A session that takes advisory lock ``key`` and then idles, as hung workers do."""
    session = connect(server, sessions)
    session.execute("SELECT pg_advisory_lock(%s)", (key,))
    return session


def incident_of(daemon: LockwatchProcess, target: str, pid: int) -> dict[str, Any]:
    """The open incident whose root is ``pid``, as the daemon's API serves it."""

    def found() -> dict[str, Any] | None:
        answer = requests.get(
            f"{daemon.base}/api/v1/incidents", params={"state": "open", "target": target}, timeout=5
        ).json()
        return next((i for i in answer["incidents"] if i["root"]["pid"] == pid), None)

    return wait_until(found, timeout=30, message=f"an incident of pid {pid} on {target}")


def actions_on_timeline(daemon: LockwatchProcess, incident_id: str, count: int) -> list[str]:
    """The ``action`` events of the incident's timeline, once there are ``count``."""

    def events() -> list[str] | None:
        document = requests.get(f"{daemon.base}/api/v1/incidents/{incident_id}", timeout=5).json()
        assert_valid_incidents(document)
        found = [e["detail"] for e in document["incident"]["timeline"] if e["event"] == "action"]
        return found if len(found) >= count else None

    return wait_until(events, timeout=30, message=f"{count} action(s) on {incident_id}'s timeline")


def terminate(daemon: LockwatchProcess, incident_id: str, *flags: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["terminate", "-c", str(daemon.config), incident_id, *flags])
    return result.exit_code, result.output


def test_a_hung_holder_is_ended_only_after_yes_and_the_timeline_says_who(
    server: PidNamespaceServer, daemon: LockwatchProcess, sessions: list[Session]
) -> None:
    hung = holder(server, sessions, 4201)
    pid = hung.info.backend_pid
    incident = incident_of(daemon, "main", pid)
    for path in (
        f"/api/v1/incidents/{incident['id']}",
        f"/api/v1/incidents/{incident['id']}/terminate",
    ):
        asked = requests.post(f"{daemon.base}{path}", json={"yes": True}, timeout=5)
        assert asked.status_code >= 400  # no HTTP endpoint can end anything
    assert session_alive(server.dsn(), pid)
    command = [sys.executable, "-m", "lockwatch", "terminate", "-c", str(daemon.config)]
    dry = subprocess.run(
        [*command, incident["id"]], check=False, capture_output=True, text=True, timeout=60
    )
    assert dry.returncode == 0, dry.stderr
    assert "dry run: nothing was done" in dry.stdout
    assert "it has no open transaction: nothing is rolled back" in dry.stdout
    assert f"pg_terminate_backend({pid})" in dry.stdout
    assert session_alive(server.dsn(), pid), "a dry run ended the holder"
    as_alice = {**os.environ, "SUDO_USER": "alice"}  # sudo lockwatch terminate, run by alice
    done = subprocess.run(
        [*command, incident["id"], "--yes"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env=as_alice,
    )
    assert done.returncode == 0, done.stderr
    assert f"done: pid {pid}" in done.stdout
    assert not session_alive(server.dsn(), pid)
    with psycopg.connect(server.dsn(), autocommit=True) as other:
        assert other.execute("SELECT pg_try_advisory_lock(4201)").fetchone() == (True,)
    (action,) = actions_on_timeline(daemon, incident["id"], 1)
    assert action.startswith("terminate done: pid")
    assert action.endswith("by alice (as root) on " + socket.gethostname() + ", role act_main")
    for output in (dry.stdout + dry.stderr, done.stdout + done.stderr, daemon.log(whole=True)):
        assert ONCALL_PASSWORD not in output
    state = Path(str(daemon.config)).parent / "state"
    assert ONCALL_PASSWORD not in (state / "actions-main.jsonl").read_text()
    assert "terminate done" in daemon.log() and "role act_main" in daemon.log()

    # The session is gone: the incident resolves, and a second attempt is refused as such.
    wait_until(
        lambda: (
            requests.get(f"{daemon.base}/api/v1/incidents/{incident['id']}", timeout=5).json()[
                "incident"
            ]["state"]
            == "resolved"
        ),
        message="the incident resolved",
    )
    code, output = terminate(daemon, incident["id"], "--yes")
    assert code == EXIT_CODES[Verdict.RESOLVED], output
    assert "refused (resolved)" in actions_on_timeline(daemon, incident["id"], 2)[1]


def test_a_pid_given_to_another_backend_between_the_look_and_the_act_is_refused(
    server: PidNamespaceServer, daemon: LockwatchProcess, sessions: list[Session]
) -> None:
    hung = holder(server, sessions, 4202)
    pid = hung.info.backend_pid
    incident = incident_of(daemon, "main", pid)
    code, output = terminate(daemon, incident["id"])
    assert code == 0 and "dry run" in output  # the look
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGSTOP)  # the daemon has not polled since the look
    try:
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        wait_until(lambda: not session_alive(server.dsn(), pid), message="the holder gone")
        code, output = terminate(daemon, incident["id"], "--yes")
        assert code == EXIT_CODES[Verdict.GONE], output
        bystander = reuse(server, sessions, pid)
        code, output = terminate(daemon, incident["id"], "--yes")
        assert code == EXIT_CODES[Verdict.REUSED], output
        assert f"pid {pid} is another session now" in output
        assert not bystander.closed and bystander.execute("SELECT 1").fetchone() == (1,)
    finally:
        daemon.proc.send_signal(signal.SIGCONT)
    gone, reused = actions_on_timeline(daemon, incident["id"], 2)
    assert "refused (gone)" in gone
    assert "refused (reused)" in reused


def reuse(server: PidNamespaceServer, sessions: list[Session], pid: int) -> Session:
    """A new backend with ``pid``: the server's next fork is given it."""

    def connected() -> Session | None:
        server.next_pid_is(pid)
        session = connect(server, sessions)
        return session if session.info.backend_pid == pid else None

    return wait_until(connected, timeout=30, message=f"a new backend with pid {pid}")


def test_a_role_that_cannot_see_the_session_or_may_not_signal_it_is_told_so(
    server: PidNamespaceServer, daemon: LockwatchProcess, sessions: list[Session]
) -> None:
    hung = holder(server, sessions, 4203)
    pid = hung.info.backend_pid
    blind = incident_of(daemon, "blind", pid)
    code, output = terminate(daemon, blind["id"], "--yes")
    assert code == EXIT_CODES[Verdict.HIDDEN], output
    assert "cannot see the backend_start" in output and "pg_read_all_stats" in output
    weak = incident_of(daemon, "weak", pid)
    code, output = terminate(daemon, weak["id"], "--yes")
    assert code == EXIT_CODES[Verdict.DENIED], output
    assert "GRANT pg_signal_backend" in output
    assert session_alive(server.dsn(), pid)
    assert "refused (hidden)" in actions_on_timeline(daemon, blind["id"], 1)[0]
    assert "refused (denied)" in actions_on_timeline(daemon, weak["id"], 1)[0]


def test_cancel_ends_a_running_statement_and_refuses_an_idle_one(
    server: PidNamespaceServer, daemon: LockwatchProcess, sessions: list[Session]
) -> None:
    busy = connect(server, sessions)
    pid = busy.info.backend_pid
    running = run_in_thread(
        lambda: busy.execute("SELECT pg_advisory_xact_lock(4204), pg_sleep(120)")
    )
    incident = incident_of(daemon, "main", pid)
    code, output = terminate(daemon, incident["id"], "--cancel", "--yes")
    assert code == 0, output
    assert "it holds no lock now" in output
    assert isinstance(running.error(timeout=30), psycopg.errors.QueryCanceled)
    assert session_alive(server.dsn(), pid)
    idle = holder(server, sessions, 4205)
    other = incident_of(daemon, "main", idle.info.backend_pid)
    code, output = terminate(daemon, other["id"], "--cancel", "--yes")
    assert code == EXIT_CODES[Verdict.UNFIT], output
    assert "runs no statement (idle)" in output
    assert "cancel done" in actions_on_timeline(daemon, incident["id"], 1)[0]
    assert "refused (unfit)" in actions_on_timeline(daemon, other["id"], 1)[0]


def test_a_prepared_transaction_is_rolled_back_only_with_its_flag_and_by_its_owner(
    server: PidNamespaceServer, daemon: LockwatchProcess
) -> None:
    for role, key in (("app", 4206), ("act_main", 4207)):
        password = {} if role == "app" else {"password": ONCALL_PASSWORD}
        with psycopg.connect(server.dsn(user=role, **password)) as session:
            session.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
            session.execute(f"PREPARE TRANSACTION 'job-{key}'")

    def prepared(gid: str) -> dict[str, Any] | None:
        answer = requests.get(
            f"{daemon.base}/api/v1/incidents", params={"state": "open", "target": "main"}, timeout=5
        ).json()
        return next((i for i in answer["incidents"] if i["root"]["gid"] == gid), None)

    apps = wait_until(lambda: prepared("job-4206"), timeout=30, message="app's prepared one")
    code, output = terminate(daemon, apps["id"], "--yes")
    assert code == EXIT_CODES[Verdict.UNFIT], output
    code, output = terminate(daemon, apps["id"], "--rollback-prepared", "--yes")
    assert code == EXIT_CODES[Verdict.DENIED], output
    assert "only its owner (app) or a superuser" in output
    own = wait_until(lambda: prepared("job-4207"), timeout=30, message="act_main's prepared one")
    code, output = terminate(daemon, own["id"], "--rollback-prepared", "--yes")
    assert code == 0, output
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        gids = [r[0] for r in admin.execute("SELECT gid FROM pg_prepared_xacts").fetchall()]
        assert gids == ["job-4206"]
        admin.execute("ROLLBACK PREPARED 'job-4206'")
    unfit, denied = actions_on_timeline(daemon, apps["id"], 2)
    assert "refused (unfit)" in unfit and "refused (denied)" in denied
    assert "rollback_prepared done" in actions_on_timeline(daemon, own["id"], 1)[0]

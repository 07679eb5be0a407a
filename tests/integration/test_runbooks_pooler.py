"""The pooler's runbooks followed as written (``docs/runbooks.md``): Debian's
PostgreSQL 15 behind a real pgbouncer in transaction mode, watched by one
lockwatch as three targets of the same server: with pgbouncer's admin console
(``SHOW SERVERS`` decides), without it (a pooled backend is inferred from its
own history), and through the pooler itself (``target_transaction_pooled``).

A leader lock left on a pooled backend is ``lock_pooled_session`` on both
watching targets; a direct session on the pooler's host, holding a session
lock and idle, is never called pooled by either, and survives the pooled
runbook: list the incidents whose root is a pooled backend, end each with its
next step. Kinds: lock_pooled_session, target_transaction_pooled."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests
from psycopg import sql

from lockwatch.demo.pgcluster import LocalCluster, free_port
from tests.fixtures.pgbouncer import STATS_USER, PgBouncer
from tests.fixtures.postgres import MONITOR_PASSWORD, MONITOR_USER, session_alive, wait_until
from tests.fixtures.processes import LockwatchProcess
from tests.fixtures.runbooks import ONCALL_PASSWORD, Runbook, debian_cluster

pytestmark = pytest.mark.pg

STEPS = (
    ("lock_pooled_session", "confirm"),
    ("lock_pooled_session", "list"),
    ("lock_pooled_session", "stop"),
    ("target_transaction_pooled", "confirm"),
    ("target_transaction_pooled", "fix"),
)
Session = psycopg.Connection[tuple[Any, ...]]
WATCHING = ("console", "no_console")  # the targets that watch the server directly


@pytest.fixture(scope="module")
def server() -> Iterator[LocalCluster]:
    with debian_cluster() as server:
        server.create_password_role(MONITOR_USER, MONITOR_PASSWORD, "pg_monitor")
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            for role in ("app", "scheduler", STATS_USER):
                admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
            # lockwatch's role when it is given the application's pooler.
            admin.execute(sql.SQL("GRANT pg_monitor TO {}").format(sql.Identifier(STATS_USER)))
        yield server


@pytest.fixture(scope="module")
def bouncer(server: LocalCluster) -> Iterator[PgBouncer]:
    with PgBouncer(server, pool_mode="transaction", pool_size=2) as running:
        yield running


class Watched:
    """The daemon and how to reach it: its runbook, its via_pooler DSN file."""

    def __init__(self, daemon: LockwatchProcess, book: Runbook, via: Path) -> None:
        self.daemon, self.book, self.via = daemon, book, via


@pytest.fixture(scope="module")
def watched(
    server: LocalCluster, bouncer: PgBouncer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Watched]:
    tmp = tmp_path_factory.mktemp("runbooks-pooler")
    oncall = server.dsn(user="oncall", password=ONCALL_PASSWORD)
    book = Runbook({"superuser": server.dsn(), "oncall": oncall})
    book.sql("tools", "oncall-role", password=ONCALL_PASSWORD)
    direct = server.dsn(user=MONITOR_USER, password=MONITOR_PASSWORD)
    files = {
        "direct.dsn": direct,
        "via.dsn": bouncer.dsn("postgres", user=STATS_USER),
        "oncall.dsn": oncall,
    }
    for name, dsn in files.items():
        (tmp / name).write_text(dsn + "\n")
    port = free_port()
    common = (
        f"    actions: {{dsn_file: {tmp / 'oncall.dsn'}}}\n"
        "    locks: {max_hold: 1h, orphan_after: 1s}\n"
    )
    config = tmp / "lockwatch.yml"
    config.write_text(
        f"listen: 127.0.0.1:{port}\n"
        f"state_dir: {tmp / 'state'}\n"
        "defaults: {interval: 300ms, connect_timeout: 2s, statement_timeout: 2s}\n"
        "targets:\n"
        f"  - name: console\n    dsn_file: {tmp / 'direct.dsn'}\n{common}"
        f"    pgbouncer: {{dsn: {bouncer.admin_dsn()!r}}}\n"
        f"  - name: no_console\n    dsn_file: {tmp / 'direct.dsn'}\n{common}"
        f"  - name: via_pooler\n    dsn_file: {tmp / 'via.dsn'}\n{common}"
    )
    daemon = LockwatchProcess(config, tmp / "lockwatch.log", port)
    daemon.start()
    book.config, book.listen = config, f"127.0.0.1:{port}"
    book.env.update(
        DSN=direct,
        APP_DSN=bouncer.dsn("postgres", user="scheduler"),
        ONCALL_DSN=oncall,
        PGBOUNCER_ADMIN_DSN=bouncer.admin_dsn(),
    )
    try:
        yield Watched(daemon, book, tmp / "via.dsn")
    finally:
        daemon.stop()


@pytest.fixture
def sessions() -> Iterator[list[Session]]:
    opened: list[Session] = []
    yield opened
    for session in opened:
        session.close()


def connect(dsn: str, name: str, sessions: list[Session]) -> Session:
    session = psycopg.connect(dsn, autocommit=True, application_name=name)
    sessions.append(session)
    return session


def incidents(watched: Watched) -> list[dict[str, Any]]:
    answer = requests.get(
        f"http://{watched.book.listen}/api/v1/incidents", params={"state": "open"}, timeout=5
    )
    return list(answer.json()["incidents"])


def of_pid(watched: Watched, pid: int) -> dict[str, dict[str, Any]]:
    """The open incidents whose root is ``pid``, by target."""
    return {i["target"]: i for i in incidents(watched) if i["root"]["pid"] == pid}


def psql_rows(out: str) -> list[dict[str, str]]:
    """psql's aligned table as rows by column name."""
    lines = [line for line in out.splitlines() if "|" in line]
    names = [name.strip() for name in lines[0].split("|")]
    return [
        dict(zip(names, (v.strip() for v in line.split("|")), strict=True)) for line in lines[1:]
    ]


def test_the_pooled_runbook_ends_the_pooled_backend_and_never_a_direct_session(
    server: LocalCluster, bouncer: PgBouncer, watched: Watched, sessions: list[Session]
) -> None:
    book = watched.book
    app_dsn = bouncer.dsn("postgres", user="scheduler")
    # Seed 000: the nightly scheduler's leader lock, taken through the pooler,
    # stays on the backend when the scheduler is done with its client.
    leader = connect(app_dsn, "scheduler-host1", sessions)
    assert leader.execute("SELECT pg_try_advisory_lock(42)").fetchone() == (True,)
    leader.close()
    # A cron job on the pooler's host that takes its lock over a direct DSN,
    # and a bystander there with the name the pooled clients use.
    direct = connect(server.dsn(user="scheduler"), "nightly-cron", sessions)
    direct.execute("SELECT pg_advisory_lock(43)")
    bystander = connect(server.dsn(user="scheduler"), "web-worker", sessions)

    confirm = book.sh("lock_pooled_session", "confirm")
    doctor, servers = confirm
    assert doctor.code == 1 and "POOLED" in doctor.out, doctor
    # doctor's own pass through the pool renamed the backend holding the lock
    # (pgbouncer lends it to each client in turn): without a console, that
    # backend's own history shows it is pooled.
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        row = admin.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objid = 42"
        ).fetchone()
    assert row is not None
    pooled_pid = int(row[0])
    assert servers.code == 0, servers
    assert pooled_pid in {int(row["remote_pid"]) for row in psql_rows(servers.out)}, servers.out
    wait_until(
        lambda: set(WATCHING) <= set(of_pid(watched, pooled_pid)),
        timeout=30,
        message="the pooled backend's incident on both watching targets",
    )
    told = of_pid(watched, pooled_pid)
    for target in WATCHING:
        assert told[target]["root"]["kind"] == "pooled_backend", told[target]
        assert "lock_pooled_session" in told[target]["kinds"]
    inferred = [
        f["evidence"] for f in told["no_console"]["findings"] if f["kind"] == "lock_pooled_session"
    ]
    assert inferred and inferred[0]["certainty"] != "known" and inferred[0]["inferred"]
    wait_until(
        lambda: set(WATCHING) <= set(of_pid(watched, direct.info.backend_pid)),
        timeout=30,
        message="the direct cron job's orphan on both watching targets",
    )

    (listed,) = book.sh("lock_pooled_session", "list")
    ids = {line.split(" ", 1)[0] for line in listed.out.splitlines() if line}
    assert ids == {i["id"] for i in incidents(watched) if i["root"]["pid"] == pooled_pid}
    direct_incidents = of_pid(watched, direct.info.backend_pid)
    assert not ids & {i["id"] for i in direct_incidents.values()}
    for target, incident in direct_incidents.items():
        # Read through the pooler, lockwatch cannot tell a direct session from
        # a pool's backend: it names no client there (issue 25 item 8).
        through = target not in WATCHING
        assert incident["root"]["kind"] == "session"
        assert incident["root"]["client_unknown"] is through
        assert incident["root"]["application_name"] == (None if through else "nightly-cron")
        assert "lock_pooled_session" not in incident["kinds"]

    dry, act = book.sh("lock_pooled_session", "stop", incident=told["console"]["id"])
    assert dry.code == 0 and "a pooler's server connection" in dry.out, dry
    assert act.code == 0 and "done: " in act.out, act
    wait_until(
        lambda: not session_alive(server.dsn(), pooled_pid), message="the pooled backend ended"
    )
    wait_until(lambda: not of_pid(watched, pooled_pid), message="its incidents resolved")
    (again,) = book.sh("lock_pooled_session", "list")
    assert again.out.strip() == ""
    # The direct session and the bystander are untouched, and still told apart.
    assert direct.execute("SELECT 1").fetchone() == (1,)
    assert bystander.execute("SELECT 1").fetchone() == (1,)
    assert set(WATCHING) <= set(of_pid(watched, direct.info.backend_pid))


def test_lockwatch_given_the_pooler_is_told_so_and_a_direct_dsn_ends_it(
    server: LocalCluster, bouncer: PgBouncer, watched: Watched
) -> None:
    book = watched.book

    def finding() -> dict[str, Any] | None:
        for incident in incidents(watched):
            if (
                incident["target"] == "via_pooler"
                and "target_transaction_pooled" in (incident["kinds"])
            ):
                return incident
        return None

    wait_until(finding, timeout=30, message="target_transaction_pooled on via_pooler")
    via = book.with_env(DSN=bouncer.dsn("postgres", user=STATS_USER))
    doctor, evidence = via.sh("target_transaction_pooled", "confirm")
    assert doctor.code == 1 and "POOLED" in doctor.out, doctor
    assert "lockwatch works on this DSN" in doctor.out
    assert '"target": "via_pooler"' in evidence.out and "transaction" in evidence.out

    direct = server.dsn(user=STATS_USER)
    fixed = book.with_env(DIRECT_DSN=direct)
    (check,) = fixed.sh("target_transaction_pooled", "fix")
    assert check.code == 0 and "SAFE for session state" in check.out, check
    watched.via.write_text(direct + "\n")
    watched.daemon.reload()
    wait_until(lambda: finding() is None, timeout=30, message="the finding resolved")

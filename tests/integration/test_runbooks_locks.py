"""The lock runbooks followed as written (``docs/runbooks.md``), on Debian's
PostgreSQL 15 watched by a real lockwatch: each situation is made for real,
then the runbook's own blocks run with the roles they name (the on-call role
made by the runbook's own statement, with pg_signal_backend and
pg_read_all_stats only), and each shows what its text says; the fix ends the
problem and never a bystander (a session of the same application and role).

Kinds: lock_held_too_long, lock_convoy, lock_orphaned (idle, idle in a
transaction, a prepared transaction), lock_unexpected_holder,
leader_lock_missing, leader_lock_churn, lock_migration_running; and the
blocks of *Tools used below* and *Incidents and their next step*."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests

from lockwatch.demo.pgcluster import LocalCluster, free_port
from lockwatch.demo.scenarios import Blackhole
from tests.fixtures.postgres import (
    MONITOR_PASSWORD,
    MONITOR_USER,
    Background,
    queue_on_lock,
    run_in_thread,
    session_alive,
    wait_until,
)
from tests.fixtures.processes import LockwatchProcess
from tests.fixtures.runbooks import (
    ONCALL_PASSWORD,
    Ran,
    Runbook,
    debian_cluster,
    fill,
    json_values,
    runbook_steps,
)

pytestmark = pytest.mark.pg

# Every block this module runs; tests/unit/test_runbook_steps.py holds the
# runbooks to it.
STEPS = (
    ("tools", "oncall-role"),
    ("tools", "locks"),
    ("incidents", "terminate-command"),
    ("incidents", "terminate"),
    ("lock_held_too_long", "confirm"),
    ("lock_held_too_long", "stop"),
    ("lock_convoy", "confirm"),
    ("lock_convoy", "client"),
    ("lock_convoy", "process"),
    ("lock_convoy", "stop"),
    ("lock_orphaned", "confirm"),
    ("lock_orphaned", "lifetime"),
    ("lock_orphaned", "stop"),
    ("lock_orphaned", "prepared"),
    ("lock_orphaned", "rollback-prepared"),
    ("lock_unexpected_holder", "confirm"),
    ("lock_unexpected_holder", "stop"),
    ("leader_lock_missing", "confirm"),
    ("leader_lock_churn", "confirm"),
    ("lock_migration_running", "confirm"),
    ("lock_migration_running", "blocker"),
)
PRISMA_KEY = 72707369  # Prisma Migrate's, in every database (the catalogue)
Session = psycopg.Connection[tuple[Any, ...]]
# The application's own settings, which an orphan of its sessions lives by.
APP_SETTING = "ALTER ROLE app SET idle_in_transaction_session_timeout = '10min'"
LOCKS = """\
    locks:
      max_hold: 1s
      orphan_after: 1h
      convoy_waiters: 2
      convoy_wait: 500ms
      leader_churn_changes: 2
      leader_churn_window: 10m
      named:
        - {name: sweep, key: 4102, max_hold: 1h, orphan_after: 1s}
        - {name: sweep-tx, key: 4106, max_hold: 1h, orphan_after: 1s}
        - {name: batch, key: 4107, max_hold: 1h, orphan_after: 1s}
        - name: nightly-leader
          key: 4103
          role: leader
          allowed_holders: {applications: ["scheduler-*"], addresses: ["127.0.0.1/32"]}
"""


@pytest.fixture(scope="module")
def server() -> Iterator[LocalCluster]:
    with debian_cluster({"max_prepared_transactions": "2"}) as server:
        server.create_password_role(MONITOR_USER, MONITOR_PASSWORD, "pg_monitor")
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            admin.execute("CREATE ROLE app LOGIN")
            admin.execute(APP_SETTING)
            admin.execute("CREATE TABLE accounts (id int)")
            admin.execute("ALTER TABLE accounts OWNER TO app")
        yield server


@pytest.fixture(scope="module")
def runbook(server: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runbook]:
    """A running lockwatch with the config the runbooks' blocks are run against."""
    tmp = tmp_path_factory.mktemp("runbooks-locks")
    dsns = {
        "superuser": server.dsn(),
        "oncall": server.dsn(user="oncall", password=ONCALL_PASSWORD),
        "owner": server.dsn(user="app"),
    }
    book = Runbook(dsns)
    # The on-call role, made by the runbook's own statement.
    book.sql("tools", "oncall-role", password=ONCALL_PASSWORD)
    port = free_port()
    (tmp / "app.dsn").write_text(server.dsn(user=MONITOR_USER, password=MONITOR_PASSWORD) + "\n")
    (tmp / "oncall.dsn").write_text(dsns["oncall"] + "\n")
    config = tmp / "lockwatch.yml"
    config.write_text(
        f"listen: 127.0.0.1:{port}\n"
        f"state_dir: {tmp / 'state'}\n"
        "defaults: {interval: 300ms, connect_timeout: 2s, statement_timeout: 2s}\n"
        "targets:\n"
        "  - name: app\n"
        f"    dsn_file: {tmp / 'app.dsn'}\n"
        f"    actions: {{dsn_file: {tmp / 'oncall.dsn'}}}\n" + LOCKS
    )
    daemon = LockwatchProcess(config, tmp / "lockwatch.log", port)
    daemon.start()
    book.config, book.listen = config, f"127.0.0.1:{port}"
    book.env.update(
        DSN=server.dsn(user=MONITOR_USER, password=MONITOR_PASSWORD),
        APP_DSN=server.dsn(user="app"),
        ONCALL_DSN=dsns["oncall"],
    )
    try:
        yield book
    finally:
        daemon.stop()


@pytest.fixture
def sessions(server: LocalCluster) -> Iterator[list[Session]]:
    """The test's application sessions, closed at its end."""
    opened: list[Session] = []
    yield opened
    for session in opened:
        session.close()


def connect(
    server: LocalCluster, sessions: list[Session], name: str, *, autocommit: bool = True
) -> Session:
    """A session of the application's role over TCP, as its workers connect."""
    session = psycopg.connect(server.dsn(user="app"), autocommit=autocommit, application_name=name)
    sessions.append(session)
    return session


def api(book: Runbook, path: str, **params: str) -> Any:
    return requests.get(f"http://{book.listen}/api/v1/{path}", params=params, timeout=5).json()


def incident_of(book: Runbook, kind: str, pid: int | None = None) -> dict[str, Any]:
    """The open incident of ``kind`` (whose root is ``pid``, if given)."""

    def found() -> dict[str, Any] | None:
        for incident in api(book, "incidents", state="open")["incidents"]:
            if kind in incident["kinds"] and pid in (None, incident["root"]["pid"]):
                return dict(incident)
        return None

    return wait_until(found, timeout=30, message=f"an open {kind} incident of pid {pid}")


def resolved(book: Runbook, incident: dict[str, Any]) -> bool:
    return not any(
        i["id"] == incident["id"] for i in api(book, "incidents", state="open")["incidents"]
    )


def answers(session: Session) -> bool:
    return session.execute("SELECT 1").fetchone() == (1,)


def ended(book: Runbook, server: LocalCluster, runbook: str, incident: dict[str, Any]) -> list[Ran]:
    """The kind's *Stop the bleeding* block: the dry run, then --yes."""
    dry, act = book.sh(runbook, "stop", incident=incident["id"])
    assert dry.code == 0 and "dry run: nothing was done" in dry.out, dry
    assert act.code == 0 and "done: " in act.out, act
    pid = incident["root"]["pid"]
    wait_until(lambda: not session_alive(server.dsn(), pid), message=f"pid {pid} ended")
    wait_until(lambda: resolved(book, incident), message=f"{incident['id']} resolved")
    return [dry, act]


def squeezed(sql: str) -> str:
    return re.sub(r"\s+", " ", sql).strip()


def test_the_hand_written_query_shows_keys_as_written_and_in_order(
    server: LocalCluster, runbook: Runbook, sessions: list[Session]
) -> None:
    worker = connect(server, sessions, "keys")
    keys = (10, 9, -1, -9218828629118414586)
    for key in keys:
        worker.execute("SELECT pg_advisory_lock(%s)", (key,))
    worker.execute("SELECT pg_advisory_lock(-5, 3)")
    rows = runbook.sql("tools", "locks")
    mine = [row[3] for row in rows if row[0] == worker.info.backend_pid]
    assert mine == ["-9218828629118414586", "-1", "9", "10", "-5,3"]
    worker.execute("SELECT pg_advisory_unlock_all()")


def test_a_lock_held_too_long_is_confirmed_and_its_holder_ended_by_the_steps(
    server: LocalCluster, runbook: Runbook, sessions: list[Session]
) -> None:
    bystander = connect(server, sessions, "webhook-worker")
    first, second = (connect(server, sessions, "webhook-worker") for _ in range(2))
    first.execute("SELECT pg_advisory_lock(4101)")
    second.execute("SELECT pg_advisory_lock(4108)")
    one = incident_of(runbook, "lock_held_too_long", first.info.backend_pid)
    two = incident_of(runbook, "lock_held_too_long", second.info.backend_pid)

    evidence, snapshot = runbook.sh("lock_held_too_long", "confirm")
    holders = {h["pid"]: h for h in json_values(evidence.out)}
    held = holders[first.info.backend_pid]
    assert held["held_seconds"] >= 1 and held["state"] == "idle", held
    assert held["query"] == "SELECT pg_advisory_lock(4101)"
    pid = first.info.backend_pid
    assert re.search(rf"pid {pid} webhook-worker from 127\.0\.0\.1:\d+, idle for \d", snapshot.out)

    dry, _ = ended(runbook, server, "lock_held_too_long", one)
    assert "it has no open transaction: nothing is rolled back" in dry.out

    # The incident's printed SQL is the runbook's guarded statement, filled in.
    root = two["root"]
    template = runbook_steps()[("incidents", "terminate")].text
    filled = fill(template, {"pid": root["pid"], "backend_start": root["backend_start"]})
    assert squeezed(two["next_step"]["sql"]) == squeezed(filled)
    assert f"lockwatch terminate {two['id']} -c FILE" in two["next_step"]["action"]
    dry, act = runbook.sh("incidents", "terminate-command", incident=two["id"])
    assert (dry.code, act.code) == (0, 0), (dry, act)
    wait_until(
        lambda: not session_alive(server.dsn(), root["pid"]), message="the second holder ended"
    )
    (outcome,) = runbook.sql(
        "incidents", "terminate", pid=root["pid"], backend_start=root["backend_start"]
    )
    assert outcome == (f"gone: no session has pid {root['pid']} now: nothing to end",)
    assert answers(bystander)


HOLDER = """
import sys
import psycopg
import requests


def deliver_webhook(url):
    # An HTTP call with no timeout, to a receiver that never answers.
    return requests.post(url, json={"event": "paid"})


conn = psycopg.connect(sys.argv[1], autocommit=True, application_name="webhook-worker")
conn.execute("SELECT pg_advisory_lock(4105)")
print(conn.info.backend_pid, flush=True)
deliver_webhook(sys.argv[2])
"""


@pytest.fixture
def hung_worker(
    server: LocalCluster, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A worker process that holds lock 4105 and hangs in an HTTP call: its pid
    on this host, and its session's pid on the server."""
    blackhole = Blackhole()
    script = tmp_path / "webhook_worker.py"
    script.write_text(HOLDER)
    process = subprocess.Popen(
        [sys.executable, str(script), server.dsn(user="app"), blackhole.url],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        yield process, int(process.stdout.readline())
    finally:
        process.kill()
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()
        blackhole.close()


def test_a_convoy_s_holder_process_is_found_by_its_port_and_ended_by_the_steps(
    server: LocalCluster,
    runbook: Runbook,
    sessions: list[Session],
    hung_worker: tuple[subprocess.Popen[str], int],
) -> None:
    process, pid = hung_worker
    bystander = connect(server, sessions, "webhook-worker")
    waiters: list[Background[None]] = [
        queue_on_lock(connect(server, sessions, "webhook-worker"), 4105) for _ in range(2)
    ]
    convoy = incident_of(runbook, "lock_convoy", pid)

    (snapshot,) = runbook.sh("lock_convoy", "confirm")
    assert re.search(rf"pid {pid} webhook-worker from 127\.0\.0\.1:\d+, idle for", snapshot.out)
    assert "lock 4105: 2 session(s) waiting" in snapshot.out
    ((address, port),) = runbook.sql("lock_convoy", "client", pid=pid)
    assert str(address) == "127.0.0.1"
    ss, dump = runbook.sh("lock_convoy", "process", port=port, client_pid=process.pid)
    assert f"pid={process.pid}," in ss.out, ss
    # Where it is stuck: a socket read inside requests, called with no timeout.
    assert dump.code == 0 and re.search(
        r"SocketIO\.readinto .*requests/.*deliver_webhook", dump.out, re.S
    ), dump

    ended(runbook, server, "lock_convoy", convoy)
    for waiter in waiters:
        waiter.result(timeout=30)  # each took the lock in turn and let it go
    assert answers(bystander)


def test_orphans_live_by_their_roles_settings_and_are_ended_as_their_state_costs(
    server: LocalCluster, runbook: Runbook, sessions: list[Session]
) -> None:
    bystander = connect(server, sessions, "sweeper")
    idle = connect(server, sessions, "sweeper")
    idle.execute("SELECT pg_try_advisory_lock(4102)")
    in_transaction = connect(server, sessions, "sweeper", autocommit=False)
    in_transaction.execute("SELECT pg_advisory_lock(4106)")
    first = incident_of(runbook, "lock_orphaned", idle.info.backend_pid)
    second = incident_of(runbook, "lock_orphaned", in_transaction.info.backend_pid)

    (snapshot,) = runbook.sh("lock_orphaned", "confirm")
    assert re.search(
        rf"pid {idle.info.backend_pid} sweeper from 127\.0\.0\.1:\d+, idle for", snapshot.out
    )
    assert "last query: SELECT pg_try_advisory_lock(4102)" in snapshot.out
    pid = in_transaction.info.backend_pid
    assert re.search(
        rf"pid {pid} sweeper from 127\.0\.0\.1:\d+, idle in transaction for", snapshot.out
    )

    lifetimes, doctor = runbook.sh("lock_orphaned", "lifetime")
    told = json_values(lifetimes.out)
    assert len(told) >= 2
    for lifetime in told:
        # The application role's own setting, never lockwatch's session's (2 s here).
        assert lifetime["in_transaction_seconds"] == 600, lifetime
        assert lifetime["in_transaction_bound_by"] == (
            "idle_in_transaction_session_timeout (ALTER ROLE app)"
        )
        assert lifetime["idle_bound_by"].startswith("TCP keepalive")
    assert doctor.code == 0 and "pg_monitor" not in doctor.out, doctor
    assert (
        "idle in a transaction: up to 10m, ended by idle_in_transaction_session_timeout "
        "(ALTER ROLE app)"
    ) in doctor.out

    dry, _ = ended(runbook, server, "lock_orphaned", first)
    assert "it has no open transaction: nothing is rolled back" in dry.out
    dry, _ = ended(runbook, server, "lock_orphaned", second)
    assert re.search(r"its open transaction \(open [\dhms]+\) is rolled back", dry.out), dry.out
    assert answers(bystander)


def test_a_prepared_transaction_s_orphan_is_found_and_rolled_back_by_its_owner(
    server: LocalCluster, runbook: Runbook, sessions: list[Session]
) -> None:
    batch = connect(server, sessions, "batch", autocommit=False)
    batch.execute("SELECT pg_advisory_xact_lock(4107)")
    batch.execute("PREPARE TRANSACTION 'batch-7'")
    batch.close()
    incident = incident_of(runbook, "lock_orphaned")
    assert incident["root"]["kind"] == "prepared" and incident["root"]["gid"] == "batch-7"
    rows = runbook.sql("lock_orphaned", "prepared")
    assert [(gid, owner) for gid, owner, *_ in rows] == [("batch-7", "app")]
    assert runbook.sql("lock_orphaned", "rollback-prepared", gid="batch-7") == []
    assert runbook.sql("lock_orphaned", "prepared") == []
    wait_until(lambda: resolved(runbook, incident), message="the prepared orphan resolved")


def test_a_missing_leader_then_an_unexpected_holder_then_a_churning_leader(
    server: LocalCluster, runbook: Runbook, sessions: list[Session]
) -> None:
    missing = incident_of(runbook, "leader_lock_missing")
    (snapshot,) = runbook.sh("leader_lock_missing", "confirm", target="app")
    assert snapshot.code == 1, snapshot  # problems seen
    assert re.search(r"leader_lock_missing \[\w+\]: .*nightly-leader", snapshot.out), snapshot.out

    bystander = connect(server, sessions, "dev-laptop")
    dev = connect(server, sessions, "dev-laptop")
    dev.execute("SELECT pg_advisory_lock(4103)")
    unexpected = incident_of(runbook, "lock_unexpected_holder", dev.info.backend_pid)
    wait_until(lambda: resolved(runbook, missing), message="the leader is not missing")
    (confirm,) = runbook.sh("lock_unexpected_holder", "confirm")
    (told,) = json_values(confirm.out)
    assert told["holder"] == [
        {
            "pid": dev.info.backend_pid,
            "application_name": "dev-laptop",
            "client_addr": "127.0.0.1",
            "usename": "app",
        }
    ]
    assert told["allowed_applications"] == ["scheduler-*"]
    ended(runbook, server, "lock_unexpected_holder", unexpected)
    assert answers(bystander)

    # Two schedulers in turn, each seen holding it: with the dev laptop's hold
    # before them, two changes of hands.
    before: Session | None = None
    for name in ("scheduler-1", "scheduler-2"):
        if before is not None:
            before.close()
        leader = connect(server, sessions, name)
        leader.execute("SELECT pg_advisory_lock(4103)")
        wait_until(
            lambda: held_by(runbook, "nightly-leader", leader.info.backend_pid),  # noqa: B023
            message=f"{name} seen holding the leader lock",
        )
        before = leader
    churn = incident_of(runbook, "leader_lock_churn")
    findings, locks = runbook.sh("leader_lock_churn", "confirm")
    (evidence,) = json_values(findings.out)
    assert evidence["changes"] == len(evidence["changed_at"]) == 2
    assert evidence["holder_pid"] == leader.info.backend_pid
    (history,) = json_values(locks.out)
    assert history["lock"] == "nightly-leader" and len(history["holder_changes"]) >= 2
    assert churn["root"]["kind"] in ("lock", "session")


def held_by(book: Runbook, lock: str, pid: int) -> bool:
    for target in api(book, "locks")["targets"]:
        for entry in target["locks"]:
            if entry["lock"] == lock and any(h["pid"] == pid for h in entry["holders"]):
                return True
    return False


def test_a_migration_waiting_on_a_blocker_is_left_to_finish_and_the_blocker_ended(
    server: LocalCluster, runbook: Runbook, sessions: list[Session]
) -> None:
    blocker = connect(server, sessions, "reporting", autocommit=False)
    blocker.execute("SELECT count(*) FROM accounts")  # idle in transaction, holding the table
    migration = connect(server, sessions, "prisma-migrate")

    def migrate() -> None:
        migration.execute("SELECT pg_advisory_lock(%s)", (PRISMA_KEY,))
        migration.execute("ALTER TABLE accounts ADD COLUMN note text")

    migrating = run_in_thread(migrate)
    incident = incident_of(runbook, "lock_migration_running", migration.info.backend_pid)

    snapshot, findings = runbook.sh("lock_migration_running", "confirm")
    pid, migrating_pid = blocker.info.backend_pid, migration.info.backend_pid
    assert re.search(
        rf"pid {migrating_pid} prisma-migrate from 127\.0\.0\.1:\d+, active for \S+, "
        "waiting on relation",
        snapshot.out,
    ), snapshot.out
    (told,) = json_values(findings.out)
    assert f"itself waiting on pid {pid}" in told["summary"]
    assert {"pid": pid, "state": "idle in transaction", "wait_event": "ClientRead"} in told["chain"]
    ((shown_pid, backend_start, state, *_),) = runbook.sql(
        "lock_migration_running", "blocker", blocker_pid=pid
    )
    assert (shown_pid, state) == (pid, "idle in transaction")
    (outcome,) = runbook.sql("incidents", "terminate", pid=pid, backend_start=backend_start)
    assert outcome == (f"terminated: pid {pid} is ending; its locks go free",)
    migrating.result(timeout=30)  # the migration went on and finished
    assert answers(migration)
    migration.execute("SELECT pg_advisory_unlock_all()")
    wait_until(lambda: resolved(runbook, incident), message="the migration's incident resolved")

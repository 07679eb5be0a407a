"""The runbooks of waits on relation and row locks (``docs/runbooks.md``:
lock_queue, row_lock_convoy, idle_in_transaction_blocker) followed as written
on Debian's PostgreSQL 15, with the roles they name: each situation made for
real, each block showing what its text says, the cancel ending the waiting
ALTER and nothing else."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from lockwatch.demo.pgcluster import LocalCluster
from tests.fixtures.postgres import Background, run_in_thread, wait_until
from tests.fixtures.runbooks import ONCALL_PASSWORD, Runbook, debian_cluster

pytestmark = pytest.mark.pg

# Every block this module runs; tests/unit/test_runbook_steps.py holds the
# runbooks to it.
STEPS = (
    ("lock_queue", "confirm"),
    ("lock_queue", "cancel"),
    ("row_lock_convoy", "confirm"),
    ("idle_in_transaction_blocker", "confirm"),
    ("idle_in_transaction_blocker", "timeout"),
)
Session = psycopg.Connection[tuple[Any, ...]]


@pytest.fixture(scope="module")
def server() -> Iterator[LocalCluster]:
    with debian_cluster() as server:
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            admin.execute("CREATE ROLE app LOGIN")
            admin.execute("CREATE TABLE jobs (id int PRIMARY KEY, state text)")
            admin.execute("INSERT INTO jobs VALUES (1, 'new')")
            admin.execute("ALTER TABLE jobs OWNER TO app")
        yield server


@pytest.fixture(scope="module")
def runbook(server: LocalCluster) -> Runbook:
    book = Runbook(
        {"superuser": server.dsn(), "oncall": server.dsn(user="oncall", password=ONCALL_PASSWORD)}
    )
    book.sql("tools", "oncall-role", password=ONCALL_PASSWORD)
    return book


@pytest.fixture
def sessions(server: LocalCluster) -> Iterator[list[Session]]:
    opened: list[Session] = []
    yield opened
    for session in opened:
        session.close()


def connect(
    server: LocalCluster, sessions: list[Session], name: str, *, autocommit: bool
) -> Session:
    session = psycopg.connect(server.dsn(user="app"), application_name=name, autocommit=autocommit)
    sessions.append(session)
    return session


def claim(worker: Session) -> Background[Any]:
    """A worker claiming job 1 with FOR UPDATE (no SKIP LOCKED): it waits on
    the row, and lets it go as soon as it has it."""

    def take_and_release() -> None:
        worker.execute("SELECT * FROM jobs WHERE id = 1 FOR UPDATE")
        worker.rollback()

    return run_in_thread(take_and_release)


def waiting(server: LocalCluster) -> int:
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        ).fetchone()
    return int(row[0]) if row else 0


def test_a_lock_queue_is_confirmed_and_its_waiting_alter_cancelled(
    server: LocalCluster, runbook: Runbook, sessions: list[Session]
) -> None:
    reader = connect(server, sessions, "report", autocommit=False)
    reader.execute("SELECT count(*) FROM jobs")
    migration = connect(server, sessions, "migrate", autocommit=True)
    alter = run_in_thread(lambda: migration.execute("ALTER TABLE jobs ADD COLUMN note text"))
    wait_until(lambda: waiting(server) == 1, message="the ALTER waits")
    worker = connect(server, sessions, "worker", autocommit=True)
    select = run_in_thread(lambda: worker.execute("SELECT * FROM jobs"))
    wait_until(lambda: waiting(server) == 2, message="a worker queues behind the ALTER")

    rows = runbook.sql("lock_queue", "confirm")
    by_pid = {row[0]: row for row in rows}
    alter_pid, worker_pid = migration.info.backend_pid, worker.info.backend_pid
    assert by_pid[alter_pid][4] == [reader.info.backend_pid]
    assert by_pid[worker_pid][4] == [alter_pid]  # the queue: behind the ALTER, not the reader
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        started = admin.execute(
            "SELECT backend_start FROM pg_stat_activity WHERE pid = %s", (alter_pid,)
        ).fetchone()
    assert started is not None
    (outcome,) = runbook.sql(
        "lock_queue", "cancel", waiting_pid=alter_pid, waiting_start=started[0]
    )
    assert outcome == (f"cancelled: pid {alter_pid} stops waiting; the queue behind it moves",)
    assert isinstance(alter.error(), psycopg.errors.QueryCanceled)
    select.join()  # the queued worker got its rows
    (again,) = runbook.sql("lock_queue", "cancel", waiting_pid=alter_pid, waiting_start=started[0])
    assert again[0].startswith("not waiting:")
    reader.rollback()


def test_a_row_convoy_s_holder_and_an_idle_blocker_are_confirmed(
    server: LocalCluster, runbook: Runbook, sessions: list[Session]
) -> None:
    holder = connect(server, sessions, "hung-worker", autocommit=False)
    holder.execute("SELECT * FROM jobs WHERE id = 1 FOR UPDATE")
    claims = [
        claim(connect(server, sessions, f"worker-{number}", autocommit=False))
        for number in range(2)
    ]
    wait_until(lambda: waiting(server) == 2, message="two workers wait on the row")
    pid = holder.info.backend_pid
    ((shown, app, _, _, state, age, query),) = runbook.sql(
        "row_lock_convoy", "confirm", root_pid=pid
    )
    assert (shown, app, state) == (pid, "hung-worker", "idle in transaction")
    assert "FOR UPDATE" in query and age.total_seconds() >= 0
    ((_, _, _, _, waiting_on_it),) = runbook.sql(
        "idle_in_transaction_blocker", "confirm", root_pid=pid
    )
    assert waiting_on_it >= 1
    runbook.sql("idle_in_transaction_blocker", "timeout", role="app")
    with psycopg.connect(server.dsn(user="app")) as fresh:
        setting = fresh.execute("SHOW idle_in_transaction_session_timeout").fetchone()
    assert setting == ("5min",)
    holder.rollback()
    for claiming in claims:
        claiming.join()

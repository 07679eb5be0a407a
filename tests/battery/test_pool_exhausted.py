"""pgbouncer with an exhausted pool: lockwatch's connection is accepted by
pgbouncer at once, but its session setup waits for a server connection that
never comes free (query_wait_timeout, 120 s by default). Every network step,
the setup included, runs under the watchdog: the poll fails within
statement_timeout + 1 s, as target_down with a log line."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from lockwatch.model.findings import FindingKind
from lockwatch.runner import TargetRunner
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from tests.battery.conftest import Record
from tests.fixtures.pgbouncer import PgBouncer
from tests.fixtures.postgres import PgDatabase, run_in_thread, wait_until

pytestmark = [pytest.mark.pg, pytest.mark.slow]

STATEMENT_TIMEOUT = 0.5
WATCHDOG_TICK = 0.1  # the daemon looks as each step's limit passes


@pytest.fixture
def one_server_connection(battery_db: PgDatabase) -> Iterator[PgBouncer]:
    with psycopg.connect(battery_db.server.dsn(), autocommit=True) as admin:
        if not admin.execute("SELECT 1 FROM pg_roles WHERE rolname = 'app'").fetchone():
            admin.execute("CREATE ROLE app LOGIN IN ROLE pg_monitor")
        admin.execute(
            sql.SQL("GRANT ALL ON DATABASE {} TO app").format(sql.Identifier(battery_db.database))
        )
    with PgBouncer(battery_db.server, pool_mode="transaction", pool_size=1) as running:
        yield running


def _watchdog(runner: TargetRunner, stop: threading.Event) -> None:
    """What the daemon's watch loop does for each runner."""
    while not stop.wait(WATCHDOG_TICK):
        runner.check_watchdog(time.monotonic())


def test_a_poll_through_an_exhausted_pool_fails_in_time_and_says_so(
    battery_db: PgDatabase,
    one_server_connection: PgBouncer,
    battery: Record,
    caplog: pytest.LogCaptureFixture,
) -> None:
    bouncer = one_server_connection
    # The pool's only server connection, kept in an open transaction.
    hog = psycopg.connect(bouncer.dsn(battery_db.database), prepare_threshold=None)
    hog.execute("SELECT 1")
    target = Target(
        "pooled",
        bouncer.dsn(battery_db.database),
        interval=1.0,
        connect_timeout=2.0,
        statement_timeout=STATEMENT_TIMEOUT,
    )
    runner = TargetRunner(target, Board(), StateStore(None))
    stop = threading.Event()
    watchdog = threading.Thread(target=_watchdog, args=(runner, stop), daemon=True)
    watchdog.start()
    began = time.monotonic()
    poll = run_in_thread(runner.poll_once)
    try:
        with caplog.at_level(logging.WARNING, logger="lockwatch"):
            view = poll.result(timeout=10 * (STATEMENT_TIMEOUT + 1))
        took = time.monotonic() - began
        hog.rollback()
        # The first poll after it also proves once how the pooler pools (two more
        # connections on a pool of one): up again within a few polls, by itself.
        recovered = wait_until(
            lambda: (again := runner.poll_once()).up and again,
            timeout=15,
            message="up again once the pool frees",
        )
    finally:
        hog.rollback()  # frees the pool: a poll still hanging can end
        hog.close()
        poll.join()
        stop.set()
        watchdog.join()
        runner.close()
    assert not view.up
    assert recovered.up
    (down,) = [f for f in view.findings if f.kind is FindingKind.TARGET_DOWN]
    assert "did not answer within" in down.summary
    logged = [r.getMessage() for r in caplog.records]
    assert any("hung" in line for line in logged), logged
    assert any("cannot sample" in line for line in logged), logged
    battery(
        "pool-exhausted",
        injected=(
            "the target through pgbouncer (transaction mode, pool_size 1) whose one server "
            "connection is held in an open transaction; query_wait_timeout 120 s; "
            f"statement_timeout {STATEMENT_TIMEOUT:g} s"
        ),
        did=(
            f"the session setup broken by the watchdog; the poll failed after {took:.1f} s "
            f"(step limit {runner.poll_timeout:g} s): target_down, logged "
            "'poll hung' and 'cannot sample'"
        ),
        intact="yes: no poll hangs; up again by itself once the pool frees",
    )

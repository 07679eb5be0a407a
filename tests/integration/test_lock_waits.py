"""Waits on locks of every locktype, on PostgreSQL 12 and 18: the sampler's
blockers against the server's own pg_blocking_pids(), and the findings of a
lock queue, a row lock convoy and routine short waits."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from typing import Any

import psycopg
import pytest

from lockwatch.demo.pgcluster import LocalCluster
from lockwatch.sample.locks import PgLockSampler, RawSample
from tests.fixtures.postgres import (
    MATRIX_SETTINGS,
    MONITOR_PASSWORD,
    MONITOR_USER,
    Background,
    PgDatabase,
    run_in_thread,
    version_bin_dir,
    wait_until,
)

pytestmark = pytest.mark.pg


@pytest.fixture(scope="module", params=["pg12", "pg18"])
def pg_server_12_18(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """The oldest major lockwatch supports (no waitstart) and the newest."""
    major = int(str(request.param).removeprefix("pg"))
    with LocalCluster(version_bin_dir(major), settings=MATRIX_SETTINGS) as server:
        server.create_password_role(MONITOR_USER, MONITOR_PASSWORD, "pg_monitor")
        yield server


@pytest.fixture
def db(pg_server_12_18: LocalCluster) -> Iterator[PgDatabase]:
    with closing(PgDatabase(pg_server_12_18)) as database:
        yield database


def lock_waiters(pg: PgDatabase) -> dict[int, list[int]]:
    """Ground truth: every session waiting on a lock, and its pg_blocking_pids()."""
    with psycopg.connect(pg.admin_dsn, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pid, pg_blocking_pids(pid) FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND datname = current_database()"
        ).fetchall()
    return {pid: sorted(blockers) for pid, blockers in rows}


def waiters_are(pg: PgDatabase, count: int) -> None:
    wait_until(lambda: len(lock_waiters(pg)) == count, message=f"{count} sessions wait")


def start(conn: psycopg.Connection[Any], statement: str) -> Background[Any]:
    return run_in_thread(lambda: conn.execute(statement))


def alter_queue(pg: PgDatabase, readers: int) -> tuple[psycopg.Connection[Any], list[Any]]:
    """An idle-in-transaction reader of ``jobs``, an ALTER TABLE waiting behind
    it, and ``readers`` sessions queued behind the ALTER."""
    pg.connect("setup").execute("CREATE TABLE jobs (id int PRIMARY KEY, state text)")
    reader = pg.connect("report", autocommit=False)
    reader.execute("SELECT count(*) FROM jobs")
    migration = pg.connect("migration")
    waiting = [start(migration, "ALTER TABLE jobs ADD COLUMN note text")]
    waiters_are(pg, 1)
    for number in range(readers):
        waiting.append(start(pg.connect(f"worker-{number}"), "SELECT * FROM jobs"))
        waiters_are(pg, number + 2)
    return reader, waiting


def test_every_waiter_is_blocked_by_whom_pg_blocking_pids_names(db: PgDatabase) -> None:
    reader, waiting = alter_queue(db, 3)
    sampler = PgLockSampler(db.monitor_dsn)
    try:
        sample: RawSample = sampler.sample()
    finally:
        sampler.close()
    truth = lock_waiters(db)
    assert {wait.pid: list(wait.blockers) for wait in sample.waits} == truth
    assert {pid: list(sample.backends[pid].blocked_by) for pid in truth} == truth
    alter = min(sample.waits, key=lambda wait: wait.position)
    assert (alter.mode, alter.relation, alter.hard) == (
        "AccessExclusiveLock",
        "jobs",
        (reader.info.backend_pid,),
    )
    assert reader.info.backend_pid in sample.backends
    reader.rollback()
    for background in waiting:
        background.join()

"""lockwatch's own server time per poll, read from pg_stat_statements once a
minute (every poll here), against what pg_stat_statements says to a
superuser; and a poll that goes on unharmed where the extension is missing,
not preloaded or counts none of lockwatch's statements, saying so once."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import closing

import pytest

from lockwatch.demo.pgbinaries import embedded_bin_dir
from lockwatch.demo.pgcluster import LocalCluster
from lockwatch.sample.locks import PgLockSampler
from lockwatch.sample.server_time import PollServerTime
from tests.fixtures.postgres import MONITOR_PASSWORD, MONITOR_USER, PgDatabase

pytestmark = pytest.mark.pg

ROLE_TOTAL = """
SELECT coalesce(sum(s.total_exec_time), 0)
FROM pg_stat_statements AS s JOIN pg_roles AS r ON r.oid = s.userid
JOIN pg_database AS d ON d.oid = s.dbid
WHERE r.rolname = %s AND d.datname = current_database()
"""


@pytest.fixture(scope="module")
def counted() -> Iterator[LocalCluster]:
    """A server that counts every statement (pg_stat_statements preloaded)."""
    settings = {"shared_preload_libraries": "pg_stat_statements"}
    with LocalCluster(embedded_bin_dir(), settings=settings) as server:
        server.create_password_role(MONITOR_USER, MONITOR_PASSWORD, "pg_monitor")
        yield server


def every_poll(dsn: str) -> PgLockSampler:
    """A sampler that reads its server time at every poll, not once a minute."""
    sampler = PgLockSampler(dsn)
    sampler.reader.server_time = PollServerTime(every=0.0)
    return sampler


def test_the_server_time_per_poll_is_what_pg_stat_statements_counted_for_the_role(
    counted: LocalCluster,
) -> None:
    with closing(PgDatabase(counted)) as db, closing(every_poll(db.monitor_dsn)) as sampler:
        admin = db.connect("admin")
        admin.execute("CREATE EXTENSION pg_stat_statements")
        db.connect("holder").execute("SELECT pg_advisory_lock(7)")

        def role_ms() -> float:
            row = admin.execute(ROLE_TOTAL, (MONITOR_USER,)).fetchone()
            return float(row[0]) if row else 0.0

        before = role_ms()
        assert sampler.sample().server_seconds is None  # one reading: nothing to compare yet
        second = sampler.sample()
        after = role_ms()
        assert second.server_seconds is not None
        # Between its two readings: the first reading, and the second poll's statements.
        assert 0 < second.server_seconds * 1000 <= after - before
        assert [lock.key.render() for lock in second.locks] == ["7"]


def test_a_missing_or_unloaded_pg_stat_statements_is_said_once_and_costs_no_poll(
    pg: PgDatabase, caplog: pytest.LogCaptureFixture
) -> None:
    pg.connect("holder").execute("SELECT pg_advisory_lock(8)")
    with closing(every_poll(pg.monitor_dsn)) as sampler, caplog.at_level(logging.INFO):
        samples = [sampler.sample() for _ in range(3)]
        assert [s.server_seconds for s in samples] == [None] * 3
        said = [
            r.getMessage() for r in caplog.records if "lockwatch_poll_server_seconds" in r.message
        ]
        assert len(said) == 1 and "not installed" in said[0]

        # Created but not preloaded: reading it fails, the session goes on.
        pg.connect("admin").execute("CREATE EXTENSION pg_stat_statements")
        sampler.reader.server_time = PollServerTime(every=0.0)
        caplog.clear()
        after = [sampler.sample() for _ in range(2)]
        assert [s.server_seconds for s in after] == [None, None]
        assert [[lock.key.render() for lock in s.locks] for s in after] == [["8"], ["8"]]
        said = [
            r.getMessage() for r in caplog.records if "lockwatch_poll_server_seconds" in r.message
        ]
        assert len(said) == 1 and "shared_preload_libraries" in said[0]


def test_a_role_whose_statements_are_not_counted_has_no_server_time_not_zero(
    counted: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    with closing(PgDatabase(counted)) as db:
        admin = db.connect("admin")
        admin.execute("CREATE EXTENSION pg_stat_statements")
        admin.execute(
            f"ALTER ROLE {MONITOR_USER} IN DATABASE {db.database} SET pg_stat_statements.track = none"
        )
        db.connect("holder").execute("SELECT pg_advisory_lock(9)")
        with closing(every_poll(db.monitor_dsn)) as sampler, caplog.at_level(logging.INFO):
            samples = [sampler.sample() for _ in range(3)]
        assert [s.server_seconds for s in samples] == [None] * 3
        assert [[lock.key.render() for lock in s.locks] for s in samples] == [["9"]] * 3
        said = [
            r.getMessage() for r in caplog.records if "lockwatch_poll_server_seconds" in r.message
        ]
        assert len(said) == 1 and "counts none" in said[0]

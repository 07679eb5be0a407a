"""The reliability battery: fixtures its cases share; each case's numbers are
collected, printed and written by the plugin tests/fixtures/battery_results.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import closing

import pytest

from lockwatch.demo.pgbinaries import embedded_bin_dir
from lockwatch.demo.pgcluster import LocalCluster
from tests.fixtures.battery_results import results_of
from tests.fixtures.postgres import MONITOR_PASSWORD, MONITOR_USER, PgDatabase

Record = Callable[..., None]

# The battery's own server: room for 50,000 advisory locks (the lock table
# holds max_locks_per_transaction x max_connections), and every statement
# logged with its application name, for the least-privilege case to read;
# two-phase commit on.
CLUSTER_SETTINGS = {
    "max_locks_per_transaction": "512",
    "log_statement": "all",
    "log_line_prefix": "%m [%p] app=%a user=%u db=%d ",
    "log_min_messages": "warning",
    # Room for the prepared (two-phase) transactions that hold locks with no session.
    "max_prepared_transactions": "4",
}


@pytest.fixture
def battery(request: pytest.FixtureRequest) -> Record:
    """``battery(case, injected=..., did=..., intact=...)`` records this test's row."""
    results = results_of(request.config)
    nodeid = request.node.nodeid

    def record(case: str, *, injected: str, did: str, intact: str) -> None:
        results.record(case, nodeid, injected, did, intact)

    return record


@pytest.fixture(scope="session")
def battery_cluster() -> Iterator[LocalCluster]:
    """A server of the battery's own (PostgreSQL 18), with the monitor role."""
    with LocalCluster(embedded_bin_dir(), settings=CLUSTER_SETTINGS) as server:
        server.create_password_role(MONITOR_USER, MONITOR_PASSWORD, "pg_monitor")
        yield server


@pytest.fixture
def battery_db(battery_cluster: LocalCluster) -> Iterator[PgDatabase]:
    with closing(PgDatabase(battery_cluster)) as database:
        yield database

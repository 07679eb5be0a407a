"""The reliability battery: fixtures its cases share, and the hooks that collect
each case's numbers, print the table at the end of the run and, when every
case ran and passed, write it to docs/reliability.md."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from contextlib import closing

import pytest

from lockwatch.demo.pgbinaries import embedded_bin_dir
from lockwatch.demo.pgcluster import LocalCluster
from tests.battery.report import Results
from tests.fixtures.postgres import MONITOR_PASSWORD, MONITOR_USER, PgDatabase

RESULTS = pytest.StashKey[Results]()
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


def _results(config: pytest.Config) -> Results:
    if RESULTS not in config.stash:
        config.stash[RESULTS] = Results()
    return config.stash[RESULTS]


@pytest.fixture
def battery(request: pytest.FixtureRequest) -> Record:
    """``battery(case, injected=..., did=..., intact=...)`` records this test's row."""
    results = _results(request.config)
    nodeid = request.node.nodeid

    def record(case: str, *, injected: str, did: str, intact: str) -> None:
        results.record(case, nodeid, injected, did, intact)

    return record


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call" or report.failed:
        _results(item.config).finished(item.nodeid, passed=report.passed)
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    results = _results(terminalreporter.config)
    if not results.rows:
        return
    terminalreporter.write_sep("=", "reliability battery")
    terminalreporter.write_line(results.table())
    if results.complete():
        results.write_doc()
        terminalreporter.write_line("the table is written to docs/reliability.md")
    else:
        terminalreporter.write_line(
            "docs/reliability.md is left as it is: not every case ran and passed"
        )


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

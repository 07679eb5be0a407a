"""Fixtures: real PostgreSQL servers over the version matrix, and a fresh database per test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockwatch.demo.pgcluster import LocalCluster, debian_bin_dirs, embedded_bin_dir
from tests.support import MONITOR_PASSWORD, MONITOR_USER, PgDatabase

DEBIAN_VERSION = 15


def _bin_dir(version: str) -> Path:
    if version == "pg18":
        return embedded_bin_dir()
    bin_dir = debian_bin_dirs().get(DEBIAN_VERSION)
    if bin_dir is None:
        reason = (
            f"PostgreSQL {DEBIAN_VERSION} binaries are missing from "
            f"/usr/lib/postgresql/{DEBIAN_VERSION}/bin: run scripts/bootstrap, "
            f"which installs postgresql-{DEBIAN_VERSION}"
        )
        # CI must run the whole matrix; a developer without the package still gets pg18.
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return bin_dir


@pytest.fixture(scope="session", params=["pg18", f"pg{DEBIAN_VERSION}"])
def pg_server(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """A running throwaway server, shared by the session; do not kill or stop it."""
    with LocalCluster(_bin_dir(request.param)) as server:
        server.create_password_role(MONITOR_USER, MONITOR_PASSWORD, "pg_monitor")
        yield server


@pytest.fixture
def pg(pg_server: LocalCluster) -> Iterator[PgDatabase]:
    database = PgDatabase(pg_server)
    try:
        yield database
    finally:
        database.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # `-m "not pg"` must leave out every test that starts a server, marked or not.
    for item in items:
        if "pg_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.pg)

"""The tests' fixtures come from named plugins under ``tests/fixtures``; the
other modules there are helpers the tests import."""

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from lockwatch.demo.initdb_cache import INITDB_CACHE_ENV

# Scripts the tests run as the applications' own processes, not tests: each
# worker's doctest collection imported them, and their job libraries with them
# (procrastinate: half a second of CPU per worker).
collect_ignore = ["workloads"]

pytest_plugins = (
    "tests.fixtures.suite_health",  # first: postgres.py's wait_until reports to it
    "tests.fixtures.postgres",
    "tests.fixtures.standins",
    "tests.fixtures.battery_results",
)

# The property tests check logic, not speed: on a busy machine an example may
# take seconds, which must not fail them (a test's own @settings may still set
# max_examples; it inherits these).
settings.register_profile(
    "lockwatch",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("lockwatch")


# Each test file's wall and CPU seconds in a whole run on the two-core
# development machine (written by LOCKWATCH_SUITE_TIMES=tests/file_seconds.tsv
# bash scripts/test): only an order to start files in, so a stale row costs
# time, never a result.
FILE_SECONDS = Path(__file__).with_name("file_seconds.tsv")
# A slow-marked file not measured yet: starts among the long ones.
UNMEASURED_SLOW_SECONDS = 30.0


def _file_seconds() -> dict[str, float]:
    seconds: dict[str, float] = {}
    with contextlib.suppress(FileNotFoundError):
        for line in FILE_SECONDS.read_text(encoding="utf-8").splitlines():
            wall, _cpu, path = line.split("\t")
            seconds[path] = float(wall)
    return seconds


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Longest files first: on parallel workers (scripts/test, one file per
    # worker at a time) the long ones start early and the run ends on short
    # files, not on one worker's last long one. The sort is stable: a file's
    # tests keep their order.
    seconds = _file_seconds()

    def expected(item: pytest.Item) -> float:
        default = UNMEASURED_SLOW_SECONDS if item.get_closest_marker("slow") else 0.0
        return seconds.get(item.nodeid.split("::")[0], default)

    items.sort(key=expected, reverse=True)


_INITDB_CACHE = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    # One initdb for each server binary in the whole run, copied for every
    # cluster after it (lockwatch/demo/initdb_cache.py): a hundred clusters are
    # started. Made by the controller, before the xdist workers that inherit it.
    if INITDB_CACHE_ENV not in os.environ and not hasattr(config, "workerinput"):
        cache = tempfile.mkdtemp(prefix="lockwatch-initdb-")
        os.environ[INITDB_CACHE_ENV] = cache
        config.stash[_INITDB_CACHE] = cache


def pytest_unconfigure(config: pytest.Config) -> None:
    cache = config.stash.get(_INITDB_CACHE, None)
    if cache is not None:
        shutil.rmtree(cache, ignore_errors=True)
        del os.environ[INITDB_CACHE_ENV]

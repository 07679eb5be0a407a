"""The tests' fixtures come from named plugins under ``tests/fixtures``; the
other modules there are helpers the tests import."""

import pytest
from hypothesis import HealthCheck, settings

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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Slow files first: on parallel workers (scripts/test) the long ones start
    # early and the run ends on short files, not on one worker's last long one.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)

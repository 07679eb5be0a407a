"""The tests' fixtures come from named plugins under ``tests/fixtures``; the
other modules there are helpers the tests import."""

import pytest

pytest_plugins = (
    "tests.fixtures.postgres",
    "tests.fixtures.standins",
    "tests.fixtures.battery_results",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Slow files first: on parallel workers (scripts/test) the long ones start
    # early and the run ends on short files, not on one worker's last long one.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)

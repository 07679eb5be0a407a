"""The tests' fixtures come from named plugins under ``tests/fixtures``; the
other modules there are helpers the tests import."""

pytest_plugins = (
    "tests.fixtures.postgres",
    "tests.fixtures.standins",
    "tests.fixtures.battery_results",
)

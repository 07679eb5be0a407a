"""What a lockwatch process loads when it starts (issue 32: the suite starts
lockwatch a few hundred times, each start paid in CPU): the command line
loads a command's module only when that command runs, and the daemon loads
redis, requests, psutil and markdown_it only when its config uses them.
``python -m bench.startup`` measures what that saves."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lockwatch.cli import LAZY, main

# Prints the modules loaded by the code before it, in a fresh interpreter.
LOADED = "\nimport sys\nprint(' '.join(sorted(sys.modules)))\n"
HELP = "from lockwatch.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"


def modules_loaded_by(code: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", code + LOADED],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    return set(done.stdout.strip().splitlines()[-1].split())


def loaded_by(code: str) -> set[str]:
    """The top-level packages loaded by ``code``."""
    return {name.partition(".")[0] for name in modules_loaded_by(code)}


def test_the_command_lines_help_loads_no_settings_and_no_command() -> None:
    loaded = loaded_by(HELP)
    heavy = {"psycopg", "pydantic", "yaml", "requests", "redis", "markdown_it", "prometheus_client"}
    assert loaded & heavy == set()


@pytest.mark.parametrize("module", ["lockwatch.daemon", "lockwatch.config.load"])
def test_the_daemon_loads_no_library_its_config_does_not_use(module: str) -> None:
    loaded = loaded_by(f"import {module}")
    assert loaded & {"redis", "requests", "urllib3", "psutil", "markdown_it"} == set()


# Every finding kind's evidence classes (some fifty dataclasses, a tenth of a
# start's CPU) and the detectors: what ``lockwatch check-config`` (its config
# read, its look at the queue libraries) and ``lockwatch doctor`` do without.
EVIDENCE = {"lockwatch.model.evidence", "lockwatch.model.findings", "lockwatch.detect.lock_groups"}


@pytest.mark.parametrize(
    "module",
    ["lockwatch.commands.doctor", "lockwatch.commands.library_versions", "lockwatch.config.load"],
)
def test_reading_a_config_or_doctor_builds_no_evidence_classes(module: str) -> None:
    assert modules_loaded_by(f"import {module}") & EVIDENCE == set()


def test_the_incidents_command_loads_no_postgresql_driver() -> None:
    """It reads the daemon's API or the file its history is in; psycopg is
    loaded only by what reads a DSN or connects (the history in a store)."""
    assert "psycopg" not in loaded_by("import lockwatch.commands.incidents")


@pytest.mark.parametrize("name", sorted(LAZY))
def test_a_lazy_command_is_listed_by_its_own_summary(name: str) -> None:
    command = LAZY[name].load()
    assert command.name == name
    assert LAZY[name].summary == command.get_short_help_str(limit=1000)


def test_the_help_lists_every_command_as_loading_them_all_would() -> None:
    listing = main.get_help(main.make_context("lockwatch", ["--help"], resilient_parsing=True))
    for name, lazy in LAZY.items():
        main.add_command(lazy.load(), name)
    try:
        eager = main.get_help(main.make_context("lockwatch", ["--help"], resilient_parsing=True))
    finally:
        for name in LAZY:
            main.commands.pop(name)
    assert listing == eager
    assert all(f"  {name} " in listing for name in LAZY)

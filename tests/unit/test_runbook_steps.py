"""The runbooks' executable blocks are all run by a test, sit in the section
of the kind they name, and every finding kind has some; the README's
finding table lists every kind once. The blocks themselves run against real
servers in tests/integration/test_runbooks_*.py: a runbook edit that breaks a
step fails there; one that adds a step no test runs fails here."""

from __future__ import annotations

import re

from lockwatch.model.findings import FindingKind
from lockwatch.model.incident_text import alert_name
from tests.fixtures.paths import ROOT
from tests.fixtures.runbooks import NON_KIND_SECTIONS, PLACEHOLDER, runbook_steps
from tests.integration import (
    test_runbooks_jobs,
    test_runbooks_libraries,
    test_runbooks_lock_waits,
    test_runbooks_locks,
    test_runbooks_pooler,
)

MODULES = (
    test_runbooks_locks,
    test_runbooks_pooler,
    test_runbooks_jobs,
    test_runbooks_libraries,
    test_runbooks_lock_waits,
)
# The roles an SQL block may name, each described in the runbooks' *Tools used below*.
ROLES = {"superuser", "oncall", "monitor", "app", "owner"}


def run_by_tests() -> set[tuple[str, str]]:
    return {step for module in MODULES for step in module.STEPS}


def test_every_executable_block_is_run_by_a_test_and_every_step_run_is_a_block() -> None:
    blocks = set(runbook_steps())
    assert blocks - run_by_tests() == set(), "blocks no test runs"
    assert run_by_tests() - blocks == set(), "steps the tests run that the runbooks lack"


def test_each_block_sits_in_the_section_of_the_runbook_it_names() -> None:
    for step in runbook_steps().values():
        expected = NON_KIND_SECTIONS.get(step.section)
        if expected is None:
            assert step.section == alert_name(step.runbook), step
            FindingKind(step.runbook)  # a kind's section names a kind
        else:
            assert step.runbook == expected, step
        assert step.lang in ("sql", "sh"), step
        if step.lang == "sql":
            assert step.role in ROLES, step
        else:
            assert step.role is None, f"{step.key}: a shell block runs as the person's own user"


def test_every_finding_kind_has_executable_steps() -> None:
    covered = {step.runbook for step in runbook_steps().values()}
    missing = sorted(kind.value for kind in FindingKind if kind.value not in covered)
    assert missing == [], f"runbooks without an executable block: {missing}"


def test_placeholders_are_plain_names() -> None:
    for step in runbook_steps().values():
        for name in PLACEHOLDER.findall(step.text):
            assert name == name.lower(), (step.key, name)


def test_the_readme_s_finding_table_lists_every_kind_once() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme.split("## What each finding means and what to do", 1)[1].split("\n\n")[2]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    kinds = [re.match(r"\| `([a-z_]+)`", row).group(1) for row in rows]  # type: ignore[union-attr]
    assert sorted(kinds) == sorted(kind.value for kind in FindingKind)

"""The bundled Prometheus rules: promtool-clean, unit-tested both ways, one alert
per open incident named after the kind that opened it (the notifier's own
names), and a runbook for each."""

from __future__ import annotations

import re
import subprocess
from dataclasses import replace
from typing import Any

import pytest
import yaml

from lockwatch.model.findings import FindingKind
from lockwatch.model.incident_text import alert_name
from lockwatch.publish.metrics.incidents import INCIDENT_SERIES_CAP
from tests.fixtures.incident_values import incident, session_root
from tests.fixtures.metrics import metrics_of
from tests.fixtures.notify import finding
from tests.fixtures.paths import ROOT
from tests.fixtures.prometheus import binary
from tests.fixtures.snapshots import held, snapshot
from tests.unit.publish.metrics.test_registry import polled

ALERTS = ROOT / "alerts"
RULES = ALERTS / "lockwatch.rules.yml"
RULE_TESTS = ALERTS / "lockwatch.rules.test.yml"
RUNBOOKS = ROOT / "docs" / "runbooks.md"


def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def promtool(*args: str) -> str:
    result = subprocess.run(
        [binary("promtool"), *args],
        check=False,
        cwd=ALERTS,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_promtool_finds_the_rules_clean() -> None:
    out = promtool("check", "rules", RULES.name)
    assert f"SUCCESS: {len(rules())} rules found" in out


def test_promtool_unit_tests_of_every_alert_pass() -> None:
    assert "SUCCESS" in promtool("test", "rules", RULE_TESTS.name)


def test_every_finding_kind_has_its_incident_alert_under_the_notifiers_name() -> None:
    by_kind = {}
    for rule in rules():
        match = re.search(r'lockwatch_incident_active\{kind="(\w+)"\}', rule["expr"])
        if match:
            by_kind[match.group(1)] = rule
    assert set(by_kind) == {kind.value for kind in FindingKind}
    for kind, rule in by_kind.items():
        assert rule["alert"] == alert_name(kind)
        # the incident's own severity and labels; nothing that changes while it is open
        assert "labels" not in rule


def test_every_alert_has_a_severity_the_annotations_and_a_runbook_section() -> None:
    anchors = {
        line[3:].strip().lower() for line in RUNBOOKS.read_text().splitlines() if line[:3] == "## "
    }
    for rule in rules():
        name = rule["alert"]
        severity = rule.get("labels", {}).get("severity")
        # incident alerts take the incident's own severity from lockwatch_incident_active,
        # the one for incidents past its series cap theirs from their count
        assert (
            severity in {"critical", "warning", "info"}
            or "lockwatch_incident_active" in rule["expr"]
            or "lockwatch_incidents_past_series_cap" in rule["expr"]
        )
        assert set(rule["annotations"]) == {"summary", "description", "runbook_url"}, name
        # the runbooks of the lockwatch that raised it, else main's; the same anchor
        runbook = rule["annotations"]["runbook_url"]
        assert "lockwatch_web_info" in runbook and runbook.endswith(f"#{name.lower()}"), name
        assert name.lower() in anchors, f"docs/runbooks.md has no section '## {name}'"


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    document = yaml.safe_load(RULE_TESTS.read_text())
    checks = [check for test in document["tests"] for check in test["alert_rule_test"]]
    for rule in rules():
        outcomes = [bool(c["exp_alerts"]) for c in checks if c["alertname"] == rule["alert"]]
        assert True in outcomes and False in outcomes, rule["alert"]


@pytest.mark.parametrize("kind", [k.value for k in FindingKind])
def test_the_runbook_of_each_finding_kind_says_how_to_confirm_stop_and_fix_it(kind: str) -> None:
    text = RUNBOOKS.read_text()
    section = text.split(f"## {alert_name(kind)}\n", 1)[1].split("\n## ", 1)[0]
    for part in (
        "**What it means.**",
        "**Confirm.**",
        "**Stop the bleeding.**",
        "**Fix the cause.**",
    ):
        assert part in section, f"{alert_name(kind)}: missing {part}"


def test_promtool_accepts_the_incident_metrics_whatever_the_clients_named_themselves() -> None:
    hostile = session_root(app='w"orker\n{x="1"} \\ \udcff' + "y" * 300)
    many = [incident([finding()], id=f"i{n}") for n in range(INCIDENT_SERIES_CAP + 3)]
    view = replace(polled(snapshot(held(42, 1234))), incidents=(incident(root=hostile), *many))
    body = metrics_of(view).render()[0]
    result = subprocess.run(
        [binary("promtool"), "check", "metrics"],
        input=body,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert body.count(b"lockwatch_incident_active{") == INCIDENT_SERIES_CAP


CAPTURE = ALERTS / "lockwatch.rules.series"
SERIES = re.compile(r"(\w+)\{(.*)\}")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def captured_shapes() -> dict[str, set[str]]:
    """The label names each root kind's incident series carries in a live
    /metrics (tests/integration/test_alerts_live.py captures them)."""
    shapes = {}
    for line in CAPTURE.read_text().splitlines():
        if line.startswith("lockwatch_incident_active root="):
            root, names = line.removeprefix("lockwatch_incident_active root=").split(": ")
            shapes[root] = set(names.split())
    return shapes


def test_the_promtool_tests_feed_the_rules_only_series_shaped_as_lockwatch_exports_them() -> None:
    shapes = captured_shapes()
    document = yaml.safe_load(RULE_TESTS.read_text())
    fed = [
        series["series"] for test in document["tests"] for series in test.get("input_series", [])
    ]
    incidents = 0
    for text in fed:
        match = SERIES.fullmatch(text)
        assert match is not None, text
        if match.group(1) != "lockwatch_incident_active":
            continue
        incidents += 1
        labels = {name: value for name, value in LABEL.findall(match.group(2)) if value}
        names = set(labels) - {"job", "instance"}
        shape = set(shapes[labels["root"]])
        if labels["root"] == "session" and labels["kind"] == "queue_stalled":
            # opened by its stall, a holder's incident names the queue too (Naming.queue);
            # a live stall opening before its lock findings is not reproducible on cue
            shape.add("queue")
        assert names == shape, f"{text}: not as lockwatch exports a {labels['root']} root"
    assert incidents >= len(FindingKind)

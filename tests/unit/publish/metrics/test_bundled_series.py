"""What a quiet target leaves out of ``/metrics`` by default takes nothing
from the bundled alert rules and dashboard: every series they read that a
quiet target drops is one whose absence they read as zero."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import yaml

from lockwatch.model.hold_history import HISTOGRAM_BUCKETS, DurationStats, KeyHistory
from lockwatch.model.locks import LockKey
from lockwatch.model.views import TargetStatus
from lockwatch.settings.locks import LockSettings, NamedLock
from lockwatch.settings.targets import Target
from lockwatch.state.target_view import TargetView
from tests.fixtures.metrics import exposition, metrics_of
from tests.fixtures.paths import ROOT
from tests.fixtures.snapshots import DB, NOW, TARGET, held, snapshot

RULES = ROOT / "alerts" / "lockwatch.rules.yml"
DASHBOARD = ROOT / "grafana" / "lockwatch.json"
NAME = re.compile(r"\blockwatch_[a-z_]+")


def bundled_expressions() -> list[str]:
    rules = yaml.safe_load(RULES.read_text())
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        *(rule["expr"] for group in rules["groups"] for rule in group["rules"]),
        *(query["expr"] for panel in dashboard["panels"] for query in panel.get("targets", [])),
    ]


def quiet_view() -> TargetView:
    """A target with nothing wrong and something of everything a quiet
    scrape trims: a named lock, more keys than its longest-held, their past."""
    named = NamedLock("leader", LockKey.bigint(1))
    locks = (held(1, 10, held_for=900), *(held(100 + n, 20 + n, held_for=n) for n in range(5)))
    past = DurationStats(3, 1.0, 1.0, 1.0, 1.0, 1.0, 3.0, (3,) * len(HISTOGRAM_BUCKETS))
    since = NOW - timedelta(hours=1)
    return TargetView(
        Target(TARGET, "postgresql://mon@127.0.0.1/app", locks=LockSettings(named=(named,))),
        TargetStatus(TARGET, NOW, snapshot(*locks)),
        polls_total=3,
        last_success=NOW,
        lock_history=(
            KeyHistory(DB, LockKey.bigint(1), past, past, since),
            KeyHistory(DB, LockKey.bigint(104), past, past, since),
            KeyHistory("", None, past, None, since),
        ),
    )


def served(*, detail: bool) -> set[str]:
    """The sample names served for the quiet target."""
    text = exposition(metrics_of(quiet_view()), detail=detail)
    return {line.partition("{")[0] for line in text.splitlines() if f'target="{TARGET}"' in line}


def reads_absence_as_zero(expression: str, name: str) -> bool:
    """The expression compares the series above zero (absent: nothing to
    fire or show), or falls back to 0 per target where it has none."""
    above_zero = re.search(rf"{name}(\{{[^}}]*\}})?\)*\s*>\s*0\b", expression)
    return above_zero is not None or " or 0 * " in expression


def test_what_a_quiet_target_drops_is_read_as_zero_by_every_bundled_rule_and_panel() -> None:
    dropped = served(detail=True) - served(detail=False)
    # The findings' zeros go; a named lock's series and past stay.
    assert {"lockwatch_findings", "lockwatch_finding_series_dropped"} <= dropped
    assert "lockwatch_advisory_lock_hold_duration_seconds_count" not in dropped
    used = [(expr, name) for expr in bundled_expressions() for name in set(NAME.findall(expr))]
    assert {name for _, name in used} & dropped, "the bundled files read a trimmed series"
    unread = [(name, expr) for expr, name in used if name in dropped]
    assert all(reads_absence_as_zero(expr, name) for name, expr in unread), unread

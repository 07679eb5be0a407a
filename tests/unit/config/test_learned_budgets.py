"""``max_hold: auto``, ``orphan_after: auto``, the learning period and leader
churn in a config file."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from lockwatch.config.load import ConfigError, load_settings
from lockwatch.settings.fields import Learned
from lockwatch.settings.locks import Learning


def write(tmp_path: Path, locks: str) -> Path:
    path = tmp_path / "lockwatch.yml"
    text = f"""\
        targets:
          - name: orders
            dsn: postgresql://mon@127.0.0.1/app
            locks:
{textwrap.indent(textwrap.dedent(locks), " " * 14)}
        """
    path.write_text(textwrap.dedent(text))
    return path


def test_auto_budgets_and_the_learning_period_load(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        max_hold: auto
        learning: {period: 10s, min_holds: 5, factor: 4, floor: 500ms}
        leader_churn_changes: 4
        leader_churn_window: 1h
        named:
          - {name: webhook, key: 42, max_hold: auto, orphan_after: auto}
          - {name: nightly, key: 43, max_hold: 30s}
        """,
    )
    (target,) = load_settings(path, {}).targets
    locks = target.locks
    assert locks.max_hold is Learned.AUTO and locks.orphan_after == 600.0
    assert locks.static_max_hold == 300.0  # what applies while a key learns
    assert locks.learning == Learning(period=10.0, min_holds=5, factor=4.0, floor=0.5)
    assert (locks.leader_churn_changes, locks.leader_churn_window) == (4, 3600.0)
    webhook, nightly = locks.named
    assert webhook.max_hold is Learned.AUTO and webhook.orphan_after is Learned.AUTO
    assert nightly.max_hold == 30.0


@pytest.mark.parametrize(
    ("locks", "message"),
    [
        ("max_hold: automatic\n", "not a duration"),
        ("max_hold: 0s\n", "must be greater than 0"),
        ("learning: {factor: 0.5}\n", "at least 1"),
        ("leader_churn_changes: 1\n", "at least 2"),
    ],
)
def test_a_bad_learning_setting_is_reported_at_its_path(
    tmp_path: Path, locks: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(write(tmp_path, locks), {})
    assert "targets[0].locks." in str(caught.value)
    assert message in str(caught.value)

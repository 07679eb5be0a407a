"""``replica:`` (or ``--replica``): replicas that notify elect one sender, so
they need the shared store and a lease a sender can send within."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from lockwatch.cli import main
from lockwatch.config.load import ConfigError, load_settings

ENV = {"TG_TOKEN": "123456:AAE-secret-bot-token"}
NOTIFY = """notify:
  {lease}channels:
    - {{name: ops, type: telegram, bot_token: "${{TG_TOKEN}}", chat_id: "-100"}}
"""
STORE = "pings:\n  store: postgres\n  dsn: host=store dbname=lockwatch\n"


def write(tmp_path: Path, *, replica: bool = True, store: bool = True, lease: str = "") -> Path:
    path = tmp_path / "lockwatch.yml"
    path.write_text(
        "targets:\n  - name: main\n    dsn: host=db\n"
        + ("replica: lockwatch-a\n" if replica else "")
        + (STORE if store else "")
        + NOTIFY.format(lease=f"lease: {lease}\n  " if lease else "")
    )
    return path


def problems(path: Path, replica: str | None = None) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_settings(path, ENV, replica=replica)
    return str(caught.value).splitlines()


def test_a_replica_with_the_shared_store_elects_its_sender_with_the_default_lease(
    tmp_path: Path,
) -> None:
    settings = load_settings(write(tmp_path), ENV)
    assert settings.replica == "lockwatch-a"
    assert settings.notify.lease == 30.0


def test_a_replica_that_notifies_without_the_shared_store_is_refused_at_its_line(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, store=False)
    assert problems(path) == [
        f"{path}:4: replica: replica lockwatch-a elects one sender of notifications among "
        "the replicas through the shared store: set pings.store: postgres and pings.dsn"
    ]


def test_the_replica_flag_is_checked_as_the_file_would_be_at_the_notify_section(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, replica=False, store=False)
    assert load_settings(path, ENV).replica is None
    (problem,) = problems(path, replica="pod-1")
    assert problem.startswith(f"{path}:4: notify: --replica pod-1 elects one sender")


def test_a_lease_too_short_to_send_between_renewals_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, lease="15s")
    assert problems(path) == [
        f"{path}:9: notify.lease: lease 15s is too short: a sender renews it every third "
        "and sends only with the deadline (13s) and 1s of it left, so it must be at least 21s"
    ]


def test_without_a_replica_nothing_is_elected_and_no_store_is_needed(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, replica=False, store=False, lease="1s"), ENV)
    assert settings.replica is None


def test_run_with_a_replica_flag_but_no_shared_store_exits_2_naming_the_file_and_line(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, replica=False, store=False)
    result = CliRunner().invoke(main, ["run", "-c", str(path), "--replica", "pod-1"], env=ENV)
    assert result.exit_code == 2
    assert f"{path}:4: notify: --replica pod-1 elects one sender" in result.output
    assert ENV["TG_TOKEN"] not in result.output

"""The ``incidents:`` section: runbook links, how long and how many resolved
incidents are kept, and where."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from lockwatch.cli import main
from lockwatch.config.load import load_settings
from lockwatch.settings.incidents import HistoryStore
from tests.unit.config.test_loader import minimal, problems_of, write


def test_without_the_section_runbooks_are_lockwatch_s_own_and_14_days_are_kept(
    tmp_path: Path,
) -> None:
    settings = load_settings(write(tmp_path, minimal()), {})
    kept = settings.incidents
    # the runbooks this lockwatch serves, where its listen address reaches it
    assert settings.runbooks == f"http://{settings.listen}/runbooks"
    assert "github" not in settings.runbooks
    assert (kept.retention, kept.max_kept, kept.history) == (
        14 * 86400,
        1000,
        HistoryStore.STATE_DIR,
    )


def test_the_section_sets_each_of_them(tmp_path: Path) -> None:
    section = (
        "incidents:\n  runbook_base_url: https://wiki.example/runbooks\n"
        "  retention: 48h\n  max_kept: 10\n  history: pings\n"
    )
    settings = load_settings(write(tmp_path, minimal(top_extra=section)), {})
    kept = settings.incidents
    assert settings.runbooks == "https://wiki.example/runbooks"
    assert (kept.retention, kept.max_kept, kept.history) == (48 * 3600, 10, HistoryStore.PINGS)


def test_each_mistake_is_told_with_its_path(tmp_path: Path) -> None:
    section = (
        "incidents:\n  runbook_base_url: wiki/runbooks#here\n  max_kept: 0\n  history: pingz\n"
    )
    problems = problems_of(write(tmp_path, minimal(top_extra=section)))
    said = {problem.path: problem.message for problem in problems}
    assert set(said) == {"incidents.runbook_base_url", "incidents.max_kept", "incidents.history"}
    assert "did you mean 'pings'" in said["incidents.history"]


def test_external_url_makes_every_link_absolute_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    section = "external_url: https://ops.example/lockwatch/\n"
    settings = load_settings(write(tmp_path, minimal(top_extra=section)), {})
    assert settings.web_url == "https://ops.example/lockwatch"
    assert settings.runbooks == "https://ops.example/lockwatch/runbooks"
    (problem,) = problems_of(write(tmp_path, minimal(top_extra="external_url: ops.example\n")))
    assert problem.path == "external_url" and "http:// or https://" in problem.message


def test_the_external_url_flag_is_checked_before_anything_runs() -> None:
    result = CliRunner().invoke(
        main, ["run", "--dsn", "postgresql://127.0.0.1:1/x", "--web.external-url", "ops:1"]
    )
    assert result.exit_code == 2 and "--web.external-url" in result.output

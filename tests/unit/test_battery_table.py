"""The committed battery table (docs/reliability.md) agrees with the battery:
every case it runs, in its order, each passed. The figures are the run's
own; ``python -m tests.battery.report --write`` writes them from the last
complete run, which is never done by a test run itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.battery import report
from tests.battery.report import DOC, Results, doc_cases, expected_cases


def test_the_committed_table_lists_every_case_of_the_battery_passed() -> None:
    assert doc_cases(DOC.read_text(encoding="utf-8")) == expected_cases()


def test_a_complete_run_is_kept_and_written_only_by_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "reliability.md"
    doc.write_text(f"before\n{report.BEGIN}\nold\n{report.END}\nafter\n", encoding="utf-8")
    kept = tmp_path / "cache" / "battery.json"
    monkeypatch.setattr(report, "DOC", doc)
    monkeypatch.setattr(report, "LAST_RUN", kept)
    assert report.main(["--write"]) == 1  # nothing kept yet: says so, writes nothing
    assert "old" in doc.read_text(encoding="utf-8")

    results = Results()
    for case in report.CASES:
        results.record(case.id, f"t::{case.id}", "in", "did", "yes")
        results.finished(f"t::{case.id}", passed=True)
    assert results.complete()
    results.keep(kept)
    assert json.loads(kept.read_text(encoding="utf-8"))["block"] == results.block()
    assert "old" in doc.read_text(encoding="utf-8")  # keeping is not writing

    assert report.main([]) == 0  # without --write it only prints
    assert results.table() in capsys.readouterr().out
    assert "old" in doc.read_text(encoding="utf-8")
    assert report.main(["--write"]) == 0
    text = doc.read_text(encoding="utf-8")
    assert text.startswith("before\n") and text.endswith("after\n")
    assert doc_cases(text) == expected_cases()


def test_a_failed_or_missing_case_shows_in_the_table() -> None:
    results = Results()
    first, second = report.CASES[:2]
    results.record(first.id, "t::a", "in", "did", "yes")
    results.finished("t::a", passed=False)
    block = results.block()
    cases = doc_cases(block)
    assert cases[0] == (first.area, f"{first.name} (FAILED)")
    assert cases[1] == (second.area, "not run")
    assert cases != expected_cases()

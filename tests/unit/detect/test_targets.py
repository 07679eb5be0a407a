from __future__ import annotations

from lockwatch.detect.targets import detect_target_down
from lockwatch.model.evidence import TargetDownEvidence
from lockwatch.model.evidence.json_form import object_json
from lockwatch.model.findings import FindingKind, Severity, Subject
from lockwatch.model.views import TargetStatus
from tests.fixtures.evidence import evidence_as
from tests.fixtures.snapshots import NOW, ago, snapshot


def test_a_target_that_samples_fine_is_not_down() -> None:
    assert detect_target_down(TargetStatus("main", NOW, snapshot()), NOW) == []


def test_a_failing_target_is_down_since_it_started_failing() -> None:
    status = TargetStatus("main", ago(10), None, error="connection refused", failing_since=ago(95))
    [finding] = detect_target_down(status, NOW)
    assert finding.kind is FindingKind.TARGET_DOWN
    assert finding.target == "main"
    assert finding.subject == Subject()
    assert finding.severity is Severity.CRITICAL
    assert finding.since == ago(95)
    assert finding.summary == "target main cannot be sampled: connection refused"
    assert object_json(finding.evidence) == {"error": "connection refused", "down_seconds": 95.0}


def test_without_a_failure_start_it_is_down_since_the_check() -> None:
    status = TargetStatus("main", ago(10), None, error="timeout")
    [finding] = detect_target_down(status, NOW)
    assert finding.since == ago(10)
    assert evidence_as(finding, TargetDownEvidence).down_seconds == 10.0


def test_an_error_beside_a_snapshot_still_means_down() -> None:
    status = TargetStatus("main", NOW, snapshot(), error="permission denied for pg_locks")
    assert [f.kind for f in detect_target_down(status, NOW)] == [FindingKind.TARGET_DOWN]


def test_a_multiline_driver_error_stays_on_one_summary_line_and_whole_in_evidence() -> None:
    error = 'connection failed: FATAL:  role "x" does not exist\nDETAIL:  ' + "y" * 400
    [finding] = detect_target_down(TargetStatus("main", NOW, None, error=error), NOW)
    assert len(finding.summary.splitlines()) == 1
    assert finding.summary.endswith("…")
    assert evidence_as(finding, TargetDownEvidence).error == error


def test_a_missing_snapshot_without_an_error_is_reported_as_such() -> None:
    [finding] = detect_target_down(TargetStatus("main", NOW, None), NOW)
    assert finding.summary == "target main cannot be sampled: no snapshot"

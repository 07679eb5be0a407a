"""``docs/findings.schema.json`` describes what ``/api/v1/findings`` serves:
for every kind, for the findings the detectors make of any snapshot, and in
step with the evidence types themselves."""

from __future__ import annotations

from dataclasses import fields
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lockwatch.detect.jobs import detect_jobs
from lockwatch.detect.locks import detect_locks
from lockwatch.detect.queue_locks import LockContext
from lockwatch.detect.queues import QueueInput, detect_queues
from lockwatch.model import evidence as families
from lockwatch.model.findings import EVIDENCE_FAMILIES, Finding, FindingKind, Subject
from lockwatch.model.jobs import JobRun
from lockwatch.model.locks import LockSnapshot
from lockwatch.publish.api.findings import findings_document
from lockwatch.settings.jobs import JobSpec
from lockwatch.settings.locks import LockSettings
from lockwatch.settings.schedule import Schedule
from lockwatch.settings.targets import Target
from lockwatch.state.target_view import TargetView
from tests.fixtures.evidence import findings_of_every_kind
from tests.fixtures.histories import job_runs, queue_cases
from tests.fixtures.schema import assert_valid_findings, findings_schema, schema_errors
from tests.fixtures.snapshots import NOW, TARGET
from tests.unit.detect.test_locks import snapshots_with_settings

# The schema's definition of each evidence type, and of the records inside them.
DEFINITIONS = {
    "session_facts": families.SessionFacts,
    "holder": families.HolderFacts,
    "waiter": families.WaiterFacts,
    "chain_step": families.ChainStep,
    "lock_facts": families.LockEvidence,
    "lock_evidence": families.LockEvidence,
    "pooled_lock_evidence": families.PooledLockEvidence,
    "churn_evidence": families.ChurnEvidence,
    "overflow_evidence": families.OverflowEvidence,
    "lock_holder": families.LockHolderFacts,
    "worker": families.WorkerFacts,
    "queue_facts": families.QueueEvidence,
    "queue_evidence": families.QueueEvidence,
    "queue_stall_evidence": families.QueueStallEvidence,
    "stuck_jobs_evidence": families.StuckJobsEvidence,
    "rescued_runs_evidence": families.RescuedRunsEvidence,
    "no_consumer_evidence": families.NoConsumerEvidence,
    "consumer_count": families.ConsumerCount,
    "long_jobs_evidence": families.LongJobsEvidence,
    "long_job": families.LongJobFacts,
    "capacity_evidence": families.CapacityEvidence,
    "rescued_job": families.RescuedJobFacts,
    "queue_run": families.QueueRunFacts,
    "job_run": families.RunFacts,
    "duplicate_start_evidence": families.DuplicateStartEvidence,
    "overlap_evidence": families.OverlapEvidence,
    "missed_run_evidence": families.MissedRunEvidence,
    "long_run_evidence": families.LongRunEvidence,
    "failed_run_evidence": families.FailedRunEvidence,
    "transaction_pooled_evidence": families.TransactionPooledEvidence,
    "privileges_missing_evidence": families.PrivilegesMissingEvidence,
    "target_down_evidence": families.TargetDownEvidence,
    "source_down_evidence": families.SourceDownEvidence,
    "lock_wait_evidence": families.LockWaitEvidence,
    "waiting": families.WaitingFacts,
    "subject": Subject,
}


def document_of(findings: list[Finding]) -> dict[str, Any]:
    return findings_document(
        [TargetView(Target(TARGET, "postgresql://db/app"), findings=tuple(findings))]
    )


def properties(definition: dict[str, Any]) -> set[str]:
    """The property names a definition allows, its bases' included."""
    names = set(definition.get("properties", {}))
    for base in definition.get("allOf", ()):
        names |= properties(findings_schema()["$defs"][base["$ref"].rsplit("/", 1)[1]])
    return names


def test_every_definition_has_the_fields_of_its_type() -> None:
    definitions = findings_schema()["$defs"]
    for name, cls in DEFINITIONS.items():
        expected = {field.name for field in fields(cls)}
        if name.endswith(("_evidence", "_facts")) and issubclass(cls, families.FindingFacts):
            expected.add("related")
        assert properties(definitions[name]) == expected, name


def test_the_schema_selects_for_every_kind_the_families_it_carries() -> None:
    schema = findings_schema()
    assert schema["$defs"]["kind"]["enum"] == [kind.value for kind in FindingKind]
    chosen: dict[str, set[str]] = {}
    for rule in schema["$defs"]["finding"]["allOf"]:
        evidence = rule["then"]["properties"]["evidence"]
        refs = {ref["$ref"].rsplit("/", 1)[1] for ref in evidence.get("oneOf", [evidence])}
        for kind in rule["if"]["properties"]["kind"]["enum"]:
            chosen[kind] = refs
    for kind, carried in EVIDENCE_FAMILIES.items():
        assert {DEFINITIONS[name] for name in chosen[kind.value]} == set(carried), kind


def test_a_finding_of_every_kind_validates() -> None:
    assert_valid_findings(document_of(findings_of_every_kind()))


def test_evidence_of_another_kind_does_not_validate() -> None:
    document = document_of(findings_of_every_kind()[:1])
    document["findings"][0]["kind"] = "queue_stalled"
    assert schema_errors(document)


def test_a_subject_with_a_part_left_out_does_not_validate() -> None:
    document = document_of(findings_of_every_kind()[:1])
    del document["findings"][0]["subject"]["source"]
    assert schema_errors(document)


# --- the detectors' findings on any snapshot --------------------------------------

fast = settings(max_examples=100, deadline=None)


@fast
@given(snapshots_with_settings())
def test_lock_findings_of_any_snapshot_validate(case: tuple[LockSnapshot, LockSettings]) -> None:
    snap, lock_settings = case
    assert_valid_findings(document_of(detect_locks(snap, lock_settings, NOW)))


@fast
@given(queue_cases())
def test_queue_findings_of_any_history_validate(case: tuple[QueueInput, LockContext]) -> None:
    queue, context = case
    verdicts = detect_queues(TARGET, [queue], context, NOW)
    assert_valid_findings(document_of([*verdicts.findings, *context.findings]))


@fast
@given(
    runs=st.lists(job_runs(), max_size=6),
    schedule=st.none() | st.just(Schedule("0 3 * * *", grace=600)),
    max_duration=st.none() | st.floats(1, 7200),
)
def test_job_findings_of_any_runs_validate(
    runs: list[JobRun], schedule: Schedule | None, max_duration: float | None
) -> None:
    spec = JobSpec("nightly-report", schedule=schedule, max_duration=max_duration)
    found = detect_jobs(spec, runs, NOW, target=TARGET, not_before=NOW - timedelta(days=3))
    assert_valid_findings(document_of(found))

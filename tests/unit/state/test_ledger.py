from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockwatch.detect.jobs import detect_jobs
from lockwatch.detect.locks import detect_locks
from lockwatch.detect.queue_locks import LockContext
from lockwatch.detect.queues import QueueInput, detect_queues
from lockwatch.model.findings import Finding, FindingKind, Severity, Subject, finding_json
from lockwatch.model.jobs import JobRun
from lockwatch.model.locks import LockSnapshot
from lockwatch.settings.jobs import JobSpec
from lockwatch.settings.locks import LockSettings
from lockwatch.settings.schedule import Schedule
from lockwatch.state.ledger import FindingLedger
from tests.fixtures.evidence import (
    evidence_of,
    findings_of_every_kind,
    holder,
    lock_evidence,
    waiter,
)
from tests.fixtures.histories import job_runs, queue_cases
from tests.fixtures.notify import convoy
from tests.fixtures.notify import finding as finding_of
from tests.fixtures.snapshots import NOW, TARGET
from tests.unit.detect.test_locks import snapshots_with_settings

CONVOY = FindingKind.LOCK_CONVOY
HELD = FindingKind.LOCK_HELD_TOO_LONG
DOWN = FindingKind.TARGET_DOWN
QUEUE_STALLED = FindingKind.QUEUE_STALLED


def later(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def finding(
    kind: FindingKind = CONVOY,
    lock: str | None = "42",
    *,
    since: datetime = NOW,
    summary: str = "2 sessions wait on 42",
    severity: Severity = Severity.WARNING,
) -> Finding:
    subject = Subject(database=None if lock is None else "app", lock=lock)
    evidence = (
        evidence_of(kind, subject)
        if kind is DOWN
        else lock_evidence(
            lock or "42", holders=(holder(1234, state="idle"),), waiters=(waiter(1301),)
        )
    )
    return Finding(
        kind=kind,
        target=TARGET,
        subject=subject,
        severity=severity,
        since=since,
        summary=summary,
        evidence=evidence,
    )


def test_a_finding_fires_on_its_first_appearance() -> None:
    ledger = FindingLedger()
    transitions = ledger.update([finding()])
    assert transitions.fired == (finding(),)
    assert transitions.resolved == ()
    assert transitions.active == (finding(),)


def test_a_finding_does_not_fire_again_while_it_persists() -> None:
    ledger = FindingLedger()
    ledger.update([finding()])
    transitions = ledger.update([finding(since=later(10), summary="3 sessions wait on 42")])
    assert transitions.fired == ()
    assert transitions.resolved == ()
    (active,) = transitions.active
    assert active.summary == "3 sessions wait on 42", "the latest facts are shown"


def test_a_finding_resolves_when_it_is_absent() -> None:
    ledger = FindingLedger()
    ledger.update([finding(), finding(HELD)])
    transitions = ledger.update([finding(HELD)])
    assert transitions.resolved == (finding(),)
    assert transitions.fired == ()
    assert [f.kind for f in transitions.active] == [HELD]
    assert ledger.update([finding(HELD)]).resolved == (), "resolved only once"


def test_a_finding_that_comes_back_after_resolving_fires_again() -> None:
    ledger = FindingLedger()
    ledger.update([finding()])
    ledger.update([])
    assert ledger.update([finding(since=later(20))]).fired == (finding(since=later(20)),)


def test_since_keeps_the_earliest_appearance() -> None:
    ledger = FindingLedger()
    ledger.update([finding(since=later(10))])
    (active,) = ledger.update([finding(since=later(20))]).active
    assert active.since == later(10)
    # a detector that knows better (a restored hold time) may move it earlier
    (active,) = ledger.update([finding(since=NOW)]).active
    assert active.since == NOW


def test_findings_of_the_same_kind_about_different_locks_are_separate() -> None:
    ledger = FindingLedger()
    ledger.update([finding(lock="42")])
    transitions = ledger.update([finding(lock="42"), finding(lock="7,13")])
    assert [f.subject.lock for f in transitions.fired] == ["7,13"]


def test_kept_kinds_survive_their_absence_without_resolving() -> None:
    ledger = FindingLedger()
    ledger.update([finding(HELD), finding(CONVOY)])
    down = finding(DOWN, lock=None, since=later(10), summary="cannot connect")
    transitions = ledger.update([down], keep=[HELD])
    assert transitions.fired == (down,)
    assert transitions.resolved == (finding(CONVOY),)
    assert {f.kind for f in transitions.active} == {HELD, DOWN}
    (kept,) = (f for f in transitions.active if f.kind is HELD)
    assert kept == finding(HELD), "kept untouched"


def test_a_kept_finding_seen_again_after_the_outage_does_not_fire_again() -> None:
    ledger = FindingLedger()
    ledger.update([finding(HELD)])
    ledger.update([], keep=[HELD])
    transitions = ledger.update([finding(HELD, since=later(30))])
    assert transitions.fired == ()
    (active,) = transitions.active
    assert active.since == NOW


def test_active_findings_are_ordered_by_since() -> None:
    ledger = FindingLedger()
    ledger.update([finding(lock="1", since=later(5)), finding(lock="2", since=NOW)])
    assert [f.subject.lock for f in ledger.active] == ["2", "1"]


def test_a_restart_restores_the_active_set_so_nothing_is_announced_twice() -> None:
    ledger = FindingLedger()
    ledger.update([finding(), finding(DOWN, lock=None, severity=Severity.CRITICAL)])
    restored = FindingLedger()
    restored.load(json.loads(json.dumps(ledger.dump())))
    assert restored.active == ledger.active
    transitions = restored.update([finding(since=later(60))])
    assert transitions.fired == ()
    assert [f.kind for f in transitions.resolved] == [DOWN]
    assert transitions.active[0].since == NOW


def good_entry(**changes: Any) -> dict[str, Any]:
    ledger = FindingLedger()
    ledger.update([finding()])
    (entry,) = json.loads(json.dumps(ledger.dump()))
    entry.update(changes)
    return dict(entry)


@pytest.mark.parametrize(
    "entry",
    [
        None,
        "lock_convoy",
        [1, 2],
        good_entry(kind="lock_exploded"),
        good_entry(severity="apocalyptic"),
        good_entry(since="soon"),
        good_entry(since=None),
        # without a zone it cannot be ordered with the findings the detectors make
        good_entry(since=NOW.replace(tzinfo=None).isoformat()),
        good_entry(subject={"database": "app", "lock": "42", "colour": "q"}),
        good_entry(subject="app/42"),
        good_entry(evidence="pids"),
        {k: v for k, v in good_entry().items() if k != "summary"},
    ],
)
def test_a_malformed_entry_is_dropped_and_the_rest_restored(entry: Any) -> None:
    ledger = FindingLedger()
    ledger.load([entry, good_entry(kind=HELD.value)])
    assert [f.kind for f in ledger.active] == [HELD]
    assert ledger.update([finding(), finding(HELD)]).fired == (finding(),)


@pytest.mark.parametrize("entries", [None, 7, "lock_convoy", {"kind": "lock_convoy"}])
def test_a_malformed_dump_restores_nothing_without_raising(entries: Any) -> None:
    ledger = FindingLedger()
    ledger.load(entries)
    assert ledger.active == ()


# --- evidence across a restart -----------------------------------------------------


def restarted(findings: list[Finding]) -> tuple[Finding, ...]:
    ledger = FindingLedger()
    ledger.update(findings)
    restored = FindingLedger()
    restored.load(json.loads(json.dumps(ledger.dump())))
    return restored.active


def test_the_evidence_of_every_kind_survives_a_restart() -> None:
    findings = findings_of_every_kind()
    assert restarted(findings) == FindingLedger().update(findings).active


@settings(max_examples=100, deadline=None)
@given(snapshots_with_settings(), queue_cases(), st.lists(job_runs(), max_size=6))
def test_the_detectors_findings_survive_a_restart_as_they_were(
    locks: tuple[LockSnapshot, LockSettings],
    queues: tuple[QueueInput, LockContext],
    runs: list[JobRun],
) -> None:
    queue, context = queues
    spec = JobSpec("nightly-report", schedule=Schedule("0 3 * * *"), max_duration=600.0)
    findings = [
        *detect_locks(*locks, NOW),
        *detect_queues(TARGET, [queue], context, NOW).findings,
        *detect_jobs(spec, runs, NOW, target=TARGET, not_before=NOW - timedelta(days=3)),
    ]
    assert restarted(findings) == FindingLedger().update(findings).active


def test_a_state_file_from_before_typed_evidence_keeps_since_identity_and_facts() -> None:
    """Its lock findings named related ones by kind alone, its queue findings
    without a target, and its subjects had only database and lock always."""
    (convoy_, held_) = convoy()
    entries = []
    for old in (convoy_, held_):
        entry = json.loads(json.dumps(finding_json(old)))
        entry["subject"] = {"database": old.subject.database, "lock": old.subject.lock}
        entry["evidence"]["related"] = [r.kind.value for r in old.related]
        entries.append(entry)
    queue = finding_of(QUEUE_STALLED, None, subject=Subject(queue="webhooks"))
    stalled = json.loads(json.dumps(finding_json(queue)))
    stalled["subject"] = {"database": None, "lock": None, "queue": "webhooks"}
    stalled["evidence"]["related"] = [
        {"kind": "lock_convoy", "subject": {"database": "app", "lock": "42"}}
    ]
    ledger = FindingLedger()
    ledger.load([*entries, stalled])
    restored = {f.kind: f for f in ledger.active}
    assert restored[CONVOY] == replace(convoy_, related=())
    assert restored[HELD] == replace(held_, related=())
    assert restored[QUEUE_STALLED] == queue, "its relation, without a target, is left out"
    assert ledger.update([convoy_, held_]).fired == ()


def test_a_finding_whose_evidence_cannot_be_read_is_dropped_to_fire_again() -> None:
    entry = json.loads(json.dumps(finding_json(finding())))
    del entry["evidence"]["holders"]
    ledger = FindingLedger()
    ledger.load([entry, good_entry(kind=HELD.value)])
    assert [f.kind for f in ledger.active] == [HELD]
    assert ledger.update([finding(), finding(HELD)]).fired == (finding(),)

"""lockwatch's own account of an incident, from its evidence."""

from __future__ import annotations

from dataclasses import replace

from lockwatch.model.findings import FindingKind
from lockwatch.model.incident_explain import _MEANING, explain
from lockwatch.model.incidents import IncidentRoot, RootKind
from tests.fixtures.incident_values import incident, resolved
from tests.fixtures.snapshots import TARGET


def test_every_finding_kind_is_said_what_it_means() -> None:
    assert set(_MEANING) == set(FindingKind)


def test_an_open_convoy_is_told_root_first_with_its_cause_and_the_command_that_ends_it() -> None:
    said = explain(incident(id="inc-7"))
    lines = said.splitlines()
    assert lines[0] == "pid 1234 webhook-worker-1 holds lock 42, 5 waiting"
    assert "It began as lock_convoy: sessions queue on a held lock" in said
    assert "5 session(s) wait now on locks pid 1234 · webhook-worker-1 · 10.0.0.5 holds." in said
    assert "runs no SQL while it holds them" in said
    assert "`lockwatch terminate -c <config> inc-7`" in said
    assert "Or by hand: SELECT CASE WHEN a.pid IS NULL THEN 'gone:" in said


def test_a_resolved_incident_says_how_it_ended_and_offers_no_action() -> None:
    said = explain(resolved(incident()))
    assert "resolved at" in said and ": released" in said
    assert "lockwatch terminate" not in said and "Next step" not in said


def test_a_prepared_transaction_is_offered_its_own_flag() -> None:
    root = IncidentRoot(RootKind.PREPARED, TARGET, gid="job-7", database="app")
    said = explain(replace(incident(id="inc-8", root=root), waiters=0))
    assert "--rollback-prepared" in said
    assert "A prepared transaction has no session" in said

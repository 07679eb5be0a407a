"""``/api/v1/incidents``: open and resolved incidents, filtered and paged in a
stable order, every answer as ``docs/incidents.schema.json`` describes it."""

from __future__ import annotations

import json
from dataclasses import fields
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from lockwatch.detect.incidents import tell_incidents
from lockwatch.detect.locks import detect_locks
from lockwatch.model.findings import FindingKind
from lockwatch.model.incidents import (
    EventKind,
    Impact,
    Incident,
    IncidentRoot,
    NextStep,
    Resolution,
    RootKind,
    TimelineEvent,
)
from lockwatch.model.locks import LockSnapshot
from lockwatch.publish.api.findings import findings_document
from lockwatch.publish.api.incidents import (
    IncidentQuery,
    QueryError,
    incident_document,
    incidents_document,
)
from lockwatch.settings.targets import Target
from lockwatch.state.incident_history import FileHistory
from lockwatch.state.incidents import IncidentBook
from lockwatch.state.target_view import TargetView
from tests.fixtures.schema import assert_valid_findings, assert_valid_incidents, incidents_schema
from tests.fixtures.snapshots import NOW, TARGET, backend, held, snapshot
from tests.unit.detect.test_incidents import SEED_002
from tests.unit.detect.test_locks import seed_002_convoy


def told(book: IncidentBook, snap: LockSnapshot, minutes: float) -> TargetView:
    findings = detect_locks(snap, SEED_002, NOW)
    when = NOW + timedelta(minutes=minutes)
    changes = book.update(tell_incidents(findings, snap), when, minutes * 60)
    target = Target(book.target, "host=127.0.0.1 dbname=app")
    return TargetView(
        target, findings=tuple(findings), incidents=changes.active, resolved_incidents=book.recent
    )


def orphan_of(pid: int) -> LockSnapshot:
    return snapshot(
        held(pid, pid, held_for=900), backends=[backend(pid, f"worker-{pid}", idle_for=800)]
    )


@pytest.fixture
def world(tmp_path: Path) -> tuple[list[TargetView], FileHistory, list[Incident]]:
    """Three incidents resolved into the history, one open on the board."""
    history = FileHistory(tmp_path, clock=lambda: NOW)
    book = IncidentBook(TARGET, on_resolved=history.add)
    resolved: list[Incident] = []
    for n, pid in enumerate((501, 502, 503)):
        told(book, orphan_of(pid), 10 * n)
        resolved.extend(told(book, snapshot(), 10 * n + 1).resolved_incidents[:1])
    view = told(book, seed_002_convoy(), 40)
    return [view], history, resolved


def query(**params: str) -> IncidentQuery:
    return IncidentQuery.parse({name: [value] for name, value in params.items()}, NOW)


def test_open_incidents_come_first_then_resolved_ones_newest_first(
    world: tuple[list[TargetView], FileHistory, list[Incident]],
) -> None:
    views, history, resolved = world
    document = incidents_document(views, history, query())
    assert_valid_incidents(document)
    states = [(i["state"], i["id"]) for i in document["incidents"]]
    assert states[0][0] == "open"
    assert [ident for _, ident in states[1:]] == [i.id for i in reversed(resolved)]
    assert document["total"] == 4 and document["next_cursor"] is None


def test_filters_pick_by_state_target_kind_and_since(
    world: tuple[list[TargetView], FileHistory, list[Incident]],
) -> None:
    views, history, resolved = world
    only = incidents_document(views, history, query(state="resolved"))
    assert {i["state"] for i in only["incidents"]} == {"resolved"}
    assert incidents_document(views, history, query(target="elsewhere"))["total"] == 0
    convoys = incidents_document(views, history, query(kind=FindingKind.LOCK_CONVOY.value))
    assert [i["state"] for i in convoys["incidents"]] == ["open"]
    since = (resolved[-1].resolved_at or NOW).isoformat()
    recent = incidents_document(views, history, query(since=since, state="resolved"))
    assert [i["id"] for i in recent["incidents"]] == [resolved[-1].id]


def test_pages_cover_every_incident_once_in_order(
    world: tuple[list[TargetView], FileHistory, list[Incident]],
) -> None:
    views, history, _ = world
    whole = [i["id"] for i in incidents_document(views, history, query())["incidents"]]
    seen: list[str] = []
    cursor: str | None = "0"
    while cursor is not None:
        page = incidents_document(views, history, query(limit="3", cursor=cursor))
        assert_valid_incidents(page)
        seen.extend(i["id"] for i in page["incidents"])
        cursor = page["next_cursor"]
    assert seen == whole


def test_one_incident_by_id_and_none_for_an_unknown_one(
    world: tuple[list[TargetView], FileHistory, list[Incident]],
) -> None:
    views, history, resolved = world
    found = incident_document(views, history, resolved[0].id)
    assert found is not None
    assert_valid_incidents(found)
    assert found["incident"]["timeline"][0]["event"] == "opened"
    assert json.loads(json.dumps(found))["incident"]["resolution"] == "released"
    assert incident_document(views, history, "0000-0") is None


def test_every_active_finding_names_its_incident(
    world: tuple[list[TargetView], FileHistory, list[Incident]],
) -> None:
    views, _, _ = world
    document = findings_document(views)
    assert_valid_findings(document)
    (incident,) = views[0].incidents
    assert {f["incident"] for f in document["findings"]} == {incident.id}


@pytest.mark.parametrize(
    "params",
    [
        {"state": "closed"},
        {"kind": "lock_stolen"},
        {"limit": "0"},
        {"cursor": "-1"},
        {"since": "soon"},
        {"colour": "x"},
    ],
)
def test_a_parameter_that_cannot_be_read_is_refused_with_its_name(params: dict[str, str]) -> None:
    with pytest.raises(QueryError, match=next(iter(params))):
        query(**params)


@pytest.mark.parametrize(
    ("definition", "shape"),
    [
        ("incident", Incident),
        ("root", IncidentRoot),
        ("event", TimelineEvent),
        ("impact", Impact),
        ("next_step", NextStep),
    ],
)
def test_the_schema_names_every_field_of_the_model(definition: str, shape: type[Any]) -> None:
    described = incidents_schema()["$defs"][definition]
    names = [part.name for part in fields(shape)]
    assert sorted(described["properties"]) == sorted(names)
    assert sorted(described["required"]) == sorted(names)


def test_the_schema_lists_every_root_event_and_resolution() -> None:
    defs = incidents_schema()["$defs"]
    assert defs["root"]["properties"]["kind"]["enum"] == [k.value for k in RootKind]
    assert defs["event"]["properties"]["event"]["enum"] == [e.value for e in EventKind]
    resolutions = defs["incident"]["properties"]["resolution"]["enum"]
    assert resolutions == [*(r.value for r in Resolution), None]

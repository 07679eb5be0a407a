"""Flapping told once: a root back within the reopen grace reopens its
incident (same id, same story) instead of opening a new one."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from lockwatch.model.incidents import (
    EventKind,
    IncidentState,
    Resolution,
    incident_json,
    load_incident,
)
from lockwatch.state.incident_history import FileHistory
from lockwatch.state.incidents import IncidentBook
from lockwatch.state.reopen import flapping
from tests.fixtures.snapshots import NOW, TARGET, snapshot
from tests.unit.detect.test_locks import seed_002_convoy
from tests.unit.state.test_incidents import poll

GRACE = 600.0


def test_a_root_back_within_the_grace_reopens_the_same_incident_and_says_how_often() -> None:
    book = IncidentBook(TARGET, reopen_grace=GRACE)
    (first,) = poll(book, seed_002_convoy(), 0).opened
    poll(book, snapshot(), 2)  # resolved
    back = poll(book, seed_002_convoy(), 5)  # 3 min later: within the grace
    (again,) = back.opened
    assert again.id == first.id and again.state is IncidentState.OPEN
    assert again.opened_at == first.opened_at and again.resolved_at is None
    assert again.reopened == (NOW + timedelta(minutes=5),)
    assert book.recent == ()  # it is open again, not resolved
    poll(book, snapshot(), 6)
    (third,) = poll(book, seed_002_convoy(), 8).opened
    assert third.id == first.id and len(third.openings) == 3
    reopenings = [e for e in third.timeline if e.event is EventKind.REOPENED]
    assert [e.value for e in reopenings] == [2.0, 3.0]
    assert reopenings[-1].detail == (
        "its root came back 2m after it resolved: opened 3 times in 8m"
    )
    assert flapping(third, NOW + timedelta(minutes=60)) == "opened 3 times in 1h"
    # The kinds it had are not "joined" again: reopening is not getting worse.
    assert not [e for e in third.timeline if e.event is EventKind.FINDING_JOINED]


def test_a_root_back_after_the_grace_is_a_new_incident() -> None:
    book = IncidentBook(TARGET, reopen_grace=GRACE)
    (first,) = poll(book, seed_002_convoy(), 0).opened
    poll(book, snapshot(), 1)
    (later,) = poll(book, seed_002_convoy(), 1 + GRACE / 60 + 1).opened
    assert later.id != first.id and later.reopened == ()
    assert flapping(later, NOW) == ""


def test_a_root_back_after_its_target_was_unwatched_is_a_new_incident() -> None:
    book = IncidentBook(TARGET, reopen_grace=GRACE)
    (first,) = poll(book, seed_002_convoy(), 0).opened
    now = NOW + timedelta(minutes=1)
    (ended,) = book.update((), now, 60.0, unwatched=True).resolved  # the target removed
    assert ended.resolution is Resolution.UNWATCHED
    (again,) = poll(book, seed_002_convoy(), 2).opened  # watched again within the grace
    assert again.id != first.id and again.reopened == ()


def test_a_reopened_incident_survives_a_restart_and_its_json() -> None:
    book = IncidentBook(TARGET, reopen_grace=GRACE)
    poll(book, seed_002_convoy(), 0)
    poll(book, snapshot(), 1)
    (again,) = poll(book, seed_002_convoy(), 2).opened
    restored = IncidentBook(TARGET, reopen_grace=GRACE)
    restored.load(json.loads(json.dumps(book.dump())))
    assert restored.open == book.open
    assert load_incident(json.loads(json.dumps(incident_json(again)))) == again


def test_after_a_restart_an_incident_reopened_before_it_is_open_and_not_also_resolved(
    tmp_path: Path,
) -> None:
    history = FileHistory(tmp_path, retention=14 * 86400, clock=lambda: NOW)
    book = IncidentBook(TARGET, on_resolved=history.add, reopen_grace=GRACE)
    poll(book, seed_002_convoy(), 0)
    poll(book, snapshot(), 1)  # resolved: into the history
    (again,) = poll(book, seed_002_convoy(), 2).opened

    restarted = IncidentBook(TARGET, on_resolved=history.add, reopen_grace=GRACE)
    restarted.recall(history.resolved())  # as the runner does: the history, then the state
    restarted.load(json.loads(json.dumps(book.dump())))
    assert [i.id for i in restarted.open] == [again.id]
    assert [i.id for i in restarted.recent] == []
    (ended,) = poll(restarted, snapshot(), 3).resolved
    assert [i.id for i in restarted.recent] == [ended.id] and len(ended.openings) == 2

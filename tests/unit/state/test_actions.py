"""The actions file between ``lockwatch terminate`` and the daemon: what the
command appends goes on the incident's timeline once, whether the incident is
open, recently resolved or only in the history; a line still being written
waits, a broken one is skipped, and a rotated file is read anew."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from lockwatch.model.actions import ActionKind, ActionRecord, Actor, Verdict
from lockwatch.model.incidents import EventKind, Incident
from lockwatch.state.actions import ActionInbox, ActionJournal, actions_path, take_actions
from lockwatch.state.incident_history import FileHistory
from lockwatch.state.incidents import IncidentBook
from tests.fixtures.incident_values import incident, resolved
from tests.fixtures.snapshots import NOW, TARGET
from tests.unit.state.test_incidents import convoy, poll


def record(incident_id: str, verdict: Verdict = Verdict.DONE, minutes: float = 1) -> ActionRecord:
    return ActionRecord(
        id=f"a-{incident_id}-{verdict.value}-{minutes}",
        at=NOW + timedelta(minutes=minutes),
        target=TARGET,
        incident=incident_id,
        action=ActionKind.TERMINATE,
        verdict=verdict,
        detail="pid 1234 ended",
        actor=Actor("root", "alice", "db1", "oncall"),
        pid=1234,
    )


def append(directory: Path, *records: ActionRecord) -> None:
    with ActionJournal(directory, TARGET) as journal:
        for each in records:
            journal.append(each)


def actions(found: Incident) -> list[str]:
    return [e.detail for e in found.timeline if e.event is EventKind.ACTION]


def open_book() -> tuple[IncidentBook, Incident]:
    book = IncidentBook(TARGET)
    (opened,) = poll(book, convoy(5), 0).opened
    return book, opened


def test_an_action_goes_on_the_open_incident_once_with_who_did_it(tmp_path: Path) -> None:
    book, opened = open_book()
    inbox = ActionInbox(tmp_path, TARGET)
    append(tmp_path, record(opened.id))
    assert take_actions(inbox, book, None) == 1
    assert inbox.unsaved
    assert take_actions(inbox, book, None) == 0  # read once
    (detail,) = actions(book.open[0])
    assert detail == ("terminate done: pid 1234 ended; by alice (as root) on db1, role oncall")


def test_a_restart_from_a_state_saved_before_the_read_notes_it_again_but_never_twice(
    tmp_path: Path,
) -> None:
    book, opened = open_book()
    append(tmp_path, record(opened.id), record(opened.id, Verdict.REUSED, 2))
    saved = book.dump()  # the state file, saved before the poll that read the actions
    take_actions(ActionInbox(tmp_path, TARGET), book, None)
    kept = book.dump()  # ... and after it, with the cursor

    before = IncidentBook(TARGET)
    before.load(saved)
    take_actions(ActionInbox(tmp_path, TARGET), before, None)  # nothing lost
    after = IncidentBook(TARGET)
    after.load(kept)
    take_actions(ActionInbox(tmp_path, TARGET), after, None)  # a cursor lost: nothing doubled
    for restarted in (before, after):
        assert len(actions(restarted.open[0])) == 2


def kept_history(directory: Path) -> FileHistory:
    return FileHistory(directory, clock=lambda: NOW)


def test_an_action_on_a_resolved_incident_reaches_its_history(tmp_path: Path) -> None:
    history = kept_history(tmp_path)
    book = IncidentBook(TARGET, on_resolved=history.add)
    recent, old = resolved(incident(id="recent")), resolved(incident(id="old"), after=30)
    history.add(old)
    book.recall([recent])
    append(tmp_path, record("recent", Verdict.RESOLVED), record("old", Verdict.RESOLVED))
    take_actions(ActionInbox(tmp_path, TARGET), book, history)
    again = kept_history(tmp_path)
    from_file = again.get("recent")
    assert from_file is not None and actions(from_file) == actions(book.recent[0])
    kept = again.get("old")
    assert kept is not None and len(actions(kept)) == 1
    assert "refused (resolved)" in actions(kept)[0]


def test_an_action_on_an_incident_nobody_keeps_is_logged_and_passed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    book, _ = open_book()
    append(tmp_path, record("forgotten"))
    with caplog.at_level(logging.INFO):
        assert take_actions(ActionInbox(tmp_path, TARGET), book, None) == 1
    assert "incident forgotten (no longer kept): terminate done" in caplog.text


def test_a_line_still_being_written_waits_and_a_broken_one_is_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _, opened = open_book()
    inbox = ActionInbox(tmp_path, TARGET)
    path = actions_path(tmp_path, TARGET)
    path.write_bytes(b'{"id": "half')  # a writer killed mid-line
    assert inbox.take() == [] and inbox.offset == 0
    append(tmp_path, record(opened.id))  # starts a line of its own
    with caplog.at_level(logging.ERROR):
        (taken,) = inbox.take()
    assert taken.incident == opened.id
    assert "an entry that cannot be read is skipped" in caplog.text
    assert inbox.offset == path.stat().st_size


def test_a_rotated_file_is_read_from_its_start(tmp_path: Path) -> None:
    inbox = ActionInbox(tmp_path, TARGET)
    append(tmp_path, record("one"), record("two", minutes=2))
    assert len(inbox.take()) == 2
    path = actions_path(tmp_path, TARGET)
    os.replace(path, path.with_name(path.name + ".1"))
    append(tmp_path, record("three", minutes=3))
    assert [r.incident for r in inbox.take()] == ["three"]
    restored = ActionInbox(tmp_path, TARGET)
    restored.load(inbox.dump())
    assert restored.take() == []


def test_the_journal_refuses_a_state_dir_it_cannot_write(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(OSError):
        ActionJournal(missing, TARGET)


def test_records_read_back_as_written(tmp_path: Path) -> None:
    written = replace(record("x"), backend_start=NOW, gid="it's")
    append(tmp_path, written)
    assert ActionInbox(tmp_path, TARGET).take() == [written]


def test_the_runner_saves_where_it_read_with_the_incidents_it_noted(tmp_path: Path) -> None:
    """A daemon restarted after it noted an action does not note it again."""
    from lockwatch.demo.pgcluster import free_port
    from lockwatch.runner import TargetRunner
    from lockwatch.settings.targets import Target
    from lockwatch.state.board import Board
    from lockwatch.state.statefile import StateStore

    down = Target(TARGET, f"host=127.0.0.1 port={free_port()} user=x", connect_timeout=1.0)

    def runner() -> TargetRunner:
        return TargetRunner(down, Board(), StateStore(tmp_path))

    first = runner()
    (opened,) = first.poll_once().incidents  # the target is down: an incident of its own
    append(tmp_path, record(opened.id, Verdict.UNFIT))
    (noted,) = first.poll_once().incidents
    assert len(actions(noted)) == 1
    saved = json.loads((tmp_path / f"target-{TARGET}.json").read_text())
    assert saved["actions"]["offset"] == actions_path(tmp_path, TARGET).stat().st_size
    again = runner()
    (restored,) = again.poll_once().incidents
    assert restored.id == opened.id
    assert len(actions(restored)) == 1

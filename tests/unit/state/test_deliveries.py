"""The notifier's deliveries: its own record, joined to an incident's timeline
when the page or the API reads it; the incident itself never changes."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from lockwatch.model.incidents import EventKind
from lockwatch.state.deliveries import Deliveries
from lockwatch.state.incident_records import TIMELINE_LIMIT
from lockwatch.state.incidents import IncidentBook
from tests.fixtures.snapshots import NOW, TARGET
from tests.unit.detect.test_locks import seed_002_convoy
from tests.unit.state.test_incidents import poll

MINUTE = timedelta(minutes=1)


def test_a_delivery_joins_its_incident_s_timeline_and_leaves_the_incident_as_it_was() -> None:
    book = IncidentBook(TARGET)
    (opened,) = poll(book, seed_002_convoy(), 0).opened
    deliveries = Deliveries()
    deliveries.record(TARGET, opened.id, "ops-telegram", NOW + MINUTE)
    deliveries.record(TARGET, "no-such-id", "ops-telegram", NOW)

    (incident,) = book.open
    assert incident == opened  # the notifier's thread wrote nothing into it
    notes = [e for e in deliveries.joined(incident).timeline if e.event is EventKind.NOTIFIED]
    assert [(e.detail, e.at) for e in notes] == [("ops-telegram", NOW + MINUTE)]


@given(st.integers(0, 200))
def test_the_joined_timeline_stays_bounded_and_keeps_its_start(notes: int) -> None:
    book = IncidentBook(TARGET)
    (opened,) = poll(book, seed_002_convoy(), 0).opened
    deliveries = Deliveries()
    for n in range(notes):
        deliveries.record(TARGET, opened.id, f"channel-{n}", NOW + timedelta(seconds=n))
    timeline = deliveries.joined(opened).timeline
    assert len(timeline) <= TIMELINE_LIMIT
    assert timeline[0].event is EventKind.OPENED
    if notes:
        assert timeline[-1].detail == f"channel-{notes - 1}"


def test_deliveries_outlive_a_restart_in_the_state_dir(tmp_path: Path) -> None:
    book = IncidentBook(TARGET)
    (opened,) = poll(book, seed_002_convoy(), 0).opened
    Deliveries(tmp_path).record(TARGET, opened.id, "ops", NOW + MINUTE)
    (told,) = Deliveries(tmp_path).of(opened.id)
    assert (told.channel, told.at) == ("ops", NOW + MINUTE)
    assert Deliveries(None).of(opened.id) == ()

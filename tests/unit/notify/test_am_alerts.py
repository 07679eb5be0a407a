"""Incidents as Alertmanager alerts, and the book of what a channel pushed:
the labels every replica gives the same root, the words in the annotations,
and which ends each Alertmanager still has to hear."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from lockwatch.model.findings import FindingKind, Severity
from lockwatch.model.incident_text import incident_lines
from lockwatch.model.incidents import Incident, RootKind
from lockwatch.notify.am_alerts import AlertBook, incident_alert, incident_labels, rfc3339
from lockwatch.settings.notify import AlertmanagerChannel, NotifySettings, Route
from tests.fixtures.incident_values import incident, resolved, session_root
from tests.fixtures.notify import HOLDER_PID, convoy, finding
from tests.fixtures.snapshots import DB, NOW, TARGET

AM1, AM2 = "http://am-0:9093", "http://am-1:9093"
CHANNEL = AlertmanagerChannel("am", (AM1, AM2), labels={"team": "db", "severity": "low"})
SETTINGS = NotifySettings(channels=(CHANNEL,))


def test_two_replicas_incidents_of_one_root_get_the_same_labels_whatever_their_ids() -> None:
    first = incident(id="replica-a-1")
    # The other replica saw the findings join in the other order, and the
    # holder through pgbouncer's view: a pooled backend, the same session.
    pooled = replace(session_root(), kind=RootKind.POOLED_BACKEND)
    second = incident(list(reversed(first.findings)), id="replica-b-7", root=pooled)
    assert first.fingerprint == second.fingerprint and first.kinds != second.kinds
    assert (
        incident_labels(first)
        == incident_labels(second)
        == {
            "alertname": "LockwatchIncident",
            "target": TARGET,
            "fingerprint": first.fingerprint,
            "root": "session",
            "severity": "critical",
            "pid": str(HOLDER_PID),
            "database": DB,
            "lock": "42",
        }
    )
    assert incident_alert(first, CHANNEL).labels == incident_alert(second, CHANNEL).labels


def test_the_channels_labels_are_added_but_never_replace_lockwatchs_own() -> None:
    labels = dict(incident_alert(incident(), CHANNEL).labels)
    assert labels["team"] == "db" and labels["severity"] == "critical"


def test_the_annotations_carry_the_words_of_the_incident_and_this_replicas_id() -> None:
    found = incident(id="inc-9")
    alert = incident_alert(found, replace(CHANNEL, external_url="https://lw.example/"))
    annotations = dict(alert.annotations)
    assert annotations["summary"] == found.title
    assert annotations["incident"] == "inc-9"
    assert annotations["kind"] == found.kinds[0].value
    assert annotations["application"] == "webhook-worker-1"
    assert annotations["runbook_url"] == found.next_step.runbook
    assert annotations["next_step"] == "end the holder's session"
    assert annotations["sql"] == found.next_step.sql, "the statement whole, to be run"
    assert "root: pid 1234 · webhook-worker-1 · 10.0.0.5" in annotations["description"]
    assert "impact: at most 5 waiting" in annotations["description"]
    document = alert.document(NOW + timedelta(minutes=4))
    assert document["startsAt"] == rfc3339(found.opened_at)
    assert document["endsAt"] == rfc3339(NOW + timedelta(minutes=4))
    assert document["generatorURL"] == "https://lw.example/#incident-inc-9"
    assert "generatorURL" not in incident_alert(found, CHANNEL).document(NOW)


def test_a_query_a_client_wrote_never_goes_into_an_annotation() -> None:
    found = incident(convoy(query="ALTER ROLE app PASSWORD 'hunter2'"))
    assert any("hunter2" in said.text for said in incident_lines(found)), "not the case"
    assert "hunter2" not in str(incident_alert(found, CHANNEL).document(NOW))


def test_the_channels_own_credentials_are_blanked_out_of_what_it_pushes() -> None:
    channel = replace(CHANNEL, username="lw", password="s3cret-pw")
    titled = incident(title="pid 1 s3cret-pw holds lock 42")
    assert "s3cret-pw" not in str(incident_alert(titled, channel).document(NOW))


def book_with(found: Incident, settings: NotifySettings = SETTINGS) -> AlertBook:
    book = AlertBook(CHANNEL, settings)
    book.update(TARGET, [found], {}, NOW)
    return book


def test_an_alert_fires_until_its_incident_resolves_then_each_alertmanager_hears_its_end() -> None:
    found = incident()
    book = book_with(found)
    assert book.generation == 1
    push = book.payload(AM1, NOW)
    assert [d["endsAt"] for d in push.documents] == [rfc3339(NOW + timedelta(minutes=4))]
    assert [alert.incident for alert in book.pushed(AM1, push)] == [found.id]
    assert book.pushed(AM2, book.payload(AM2, NOW)) == [], "no news the second time"

    end = resolved(found, after=30)
    later = NOW + timedelta(seconds=31)
    book.update(TARGET, [], {found.id: end}, later)
    assert book.generation == 2 and book.untold == 1
    push = book.payload(AM1, later)
    assert [d["endsAt"] for d in push.documents] == [rfc3339(end.resolved_at or later)]
    book.pushed(AM1, push)
    assert book.untold == 1, "am-1 has not heard it yet"
    book.pushed(AM2, book.payload(AM2, later))
    assert book.untold == 0 and book.payload(AM1, later).documents == []


def test_an_end_an_alertmanager_never_hears_is_dropped_once_it_expired_the_alert_itself() -> None:
    found = incident()
    book = book_with(found)
    book.pushed(AM1, book.payload(AM1, NOW))  # am-1 only: am-0 never had it
    book.update(TARGET, [], {}, NOW + timedelta(seconds=10))
    assert book.payload(AM2, NOW + timedelta(seconds=10)).documents == []
    assert len(book.payload(AM1, NOW + timedelta(seconds=10)).documents) == 1
    book.forget(NOW + timedelta(minutes=4, seconds=1))
    assert book.untold == 0


def test_an_alert_no_alertmanager_took_ends_without_a_word() -> None:
    book = book_with(incident())
    book.update(TARGET, [], {}, NOW + timedelta(seconds=10))
    assert book.untold == 0 and book.payload(AM1, NOW).documents == []


def test_an_alert_that_ends_while_its_first_push_is_on_its_way_is_told_ended_there_too() -> None:
    book = book_with(incident())
    push = book.payload(AM1, NOW)
    book.update(TARGET, [], {}, NOW + timedelta(seconds=1))  # no Alertmanager had it yet
    assert book.untold == 0
    book.pushed(AM1, push)
    assert book.untold == 1
    (document,) = book.payload(AM1, NOW + timedelta(seconds=2)).documents
    assert document["endsAt"] == rfc3339(NOW)
    assert book.payload(AM2, NOW + timedelta(seconds=2)).documents == []


def test_a_severity_change_ends_the_old_alert_and_fires_the_new_one() -> None:
    warning = incident([finding(FindingKind.LOCK_HELD_TOO_LONG)], severity=Severity.WARNING)
    book = book_with(warning)
    book.pushed(AM1, book.payload(AM1, NOW))
    critical = replace(warning, severity=Severity.CRITICAL)
    later = NOW + timedelta(seconds=5)
    book.update(TARGET, [critical], {}, later)
    documents = book.payload(AM1, later).documents
    assert [(d["labels"]["severity"], d["endsAt"]) for d in documents] == [
        ("critical", rfc3339(later + timedelta(minutes=4))),
        ("warning", rfc3339(later)),
    ]


def test_an_incident_fires_once_a_finding_routed_to_the_channel_lasted_its_for() -> None:
    settings = replace(SETTINGS, routes=(Route(("am",), for_duration=60.0),))
    found = incident([finding(lasted=30)])
    book = book_with(found, settings)
    assert book.firing == {} and book.generation == 0
    book.update(TARGET, [found], {}, NOW + timedelta(seconds=30))
    assert len(book.firing) == 1 and book.generation == 1
    elsewhere = replace(settings, routes=(Route(("other",)),))
    assert book_with(found, elsewhere).firing == {}


def test_a_targets_poll_changes_its_own_alerts_only() -> None:
    book = book_with(incident())
    other = incident(root=session_root(target="billing"), id="billing-1")
    book.update("billing", [other], {}, NOW)
    assert {dict(labels)["target"] for labels in book.firing} == {TARGET, "billing"}
    book.update("billing", [], {}, NOW)
    assert {dict(labels)["target"] for labels in book.firing} == {TARGET}

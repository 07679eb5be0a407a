"""An incident's words, from the one module that makes them: the title says the
cause first and never cuts it, a resolved incident is told in the past tense,
the label of its runbook link is the kind the link goes to, and its log line
says what to do, in every log format."""

from __future__ import annotations

import io
import itertools
import json
import logging
from datetime import timedelta

import pytest

from lockwatch.daemon import log_incidents
from lockwatch.detect.incidents import tell_incidents
from lockwatch.detect.jobs import detect_jobs
from lockwatch.detect.locks import detect_locks
from lockwatch.detect.targets import detect_target_down
from lockwatch.logs import formatter
from lockwatch.model.findings import Finding, FindingKind
from lockwatch.model.incident_text import PAST, alert_name, lead_kind, root_labels
from lockwatch.model.incidents import Incident, IncidentChanges
from lockwatch.model.jobs import JobRun
from lockwatch.model.views import TargetStatus
from lockwatch.notify.message import Headline, Message, Notice
from lockwatch.notify.render import document, slack_mrkdwn
from lockwatch.publish.status.incidents import open_section
from lockwatch.settings.jobs import JobSpec
from lockwatch.state.incidents import IncidentBook
from tests.fixtures.snapshots import NOW, TARGET, snapshot
from tests.unit.detect.test_incidents import SEED_002, stall_on
from tests.unit.detect.test_locks import seed_002_convoy

REFUSED = (
    '127.0.0.1:5999/app: connection failed: connection to server at "127.0.0.1", '
    "port 5999 failed: Connection refused"
)


def opened(findings: list[Finding]) -> Incident:
    book = IncidentBook(TARGET, runbooks="https://lw.example/runbooks")
    (incident,) = book.update(tell_incidents(findings, None), NOW, 0.0).opened
    return incident


def slack_of(incident: Incident, headline: Headline = Headline.OPENED) -> str:
    message = Message("m1", "team", NOW, Notice.of(incident), headline)
    return slack_mrkdwn(document(message))


def test_a_target_down_title_says_the_cause_first_and_whole() -> None:
    status = TargetStatus(TARGET, NOW, None, REFUSED, NOW)
    incident = opened(detect_target_down(status, NOW))
    assert incident.title.startswith(f"target {TARGET} down: Connection refused (")
    assert (
        slack_of(incident)
        .splitlines()[0]
        .startswith(f"*🔥 OPENED: target {TARGET} down: Connection refused")
    )


def test_a_job_incident_names_its_job_once_and_keeps_every_host() -> None:
    spec = JobSpec("nightly", target=TARGET)
    hosts = ("batch-worker-17.eu-west-1.compute.internal", "batch-worker-18.eu-west-1.example")
    runs = [
        JobRun("nightly", "2026-12-01", NOW - timedelta(minutes=2 - n), host=host)
        for n, host in enumerate(hosts)
    ]
    findings = detect_jobs(spec, runs, NOW, target=TARGET, not_before=NOW - timedelta(days=1))
    assert [f.kind for f in findings] == [FindingKind.JOB_DUPLICATE_START, FindingKind.JOB_OVERLAP]
    incident = opened(findings)
    title = slack_of(incident).splitlines()[0]
    assert title.count("job nightly") == 1, title
    for host in hosts:
        assert host in title, title


def resolved_convoy() -> Incident:
    book = IncidentBook(TARGET)
    snap = seed_002_convoy()
    findings = [*detect_locks(snap, SEED_002, NOW), stall_on(1234, snap)]
    book.update(tell_incidents(findings, snap), NOW, 0.0)
    later = NOW + timedelta(minutes=5)
    (incident,) = book.update(tell_incidents([], snapshot()), later, 300.0).resolved
    return incident


def test_a_resolved_message_says_what_was_and_how_it_ended_in_the_past_tense() -> None:
    title = slack_of(resolved_convoy(), Headline.RESOLVED).splitlines()[0]
    assert title.startswith("*✅ RESOLVED: pid 1234 webhook-worker-1 held webhook-delivery (42)")
    assert "at most 5 waiting" in title and "after 5m" in title
    assert " holds " not in title and "idle" not in title, title


def test_every_kind_has_words_for_when_it_is_over() -> None:
    assert set(PAST) == set(FindingKind)


@pytest.mark.parametrize("order", list(itertools.permutations(range(4))))
def test_the_runbook_link_goes_to_the_kind_its_label_and_alert_name(order: tuple[int, ...]) -> None:
    snap = seed_002_convoy()
    found = [*detect_locks(snap, SEED_002, NOW), stall_on(1234, snap)]
    assert len(found) == 4
    incident = opened([found[n] for n in order])
    kind = lead_kind(incident).value
    anchor = f"#{alert_name(kind).lower()}"
    assert incident.next_step.runbook.endswith(anchor)
    assert root_labels(incident)["kind"] == kind
    card = open_section(NOW, [incident])
    assert f'href="https://lw.example/runbooks{anchor}">runbook: {kind}</a>' in card
    assert f"<https://lw.example/runbooks{anchor}|{alert_name(kind)}>" in slack_of(incident)


@pytest.mark.parametrize("log_format", ["text", "logfmt", "json"])
def test_an_incident_s_log_line_has_its_id_next_step_and_runbook(log_format: str) -> None:
    snap = seed_002_convoy()
    incident = opened(detect_locks(snap, SEED_002, NOW))
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter(log_format))
    log = logging.getLogger("lockwatch.daemon")
    log.addHandler(handler)
    try:
        changes = IncidentChanges(TARGET, active=(incident,), opened=(incident,))
        log_incidents(changes)
    finally:
        log.removeHandler(handler)
    (line,) = [line for line in stream.getvalue().splitlines() if incident.id in line]
    step = incident.next_step
    for said in (incident.id, step.action, step.runbook):
        assert said in line.replace('\\"', '"'), (said, line)
    if log_format == "json":
        fields = json.loads(line)
        assert (fields["incident"], fields["runbook"]) == (incident.id, step.runbook)
        assert fields["next_step"] == step.action and fields["sql"] == step.sql
    elif log_format == "logfmt":
        assert f"incident={incident.id} " in line and f"runbook={step.runbook}" in line
        assert "next_step=" in line and "sql=" in line


def test_a_session_s_alert_labels_name_its_lock_database_and_holder() -> None:
    snap = seed_002_convoy()
    labels = root_labels(opened(detect_locks(snap, SEED_002, NOW)))
    assert (labels["lock"], labels["database"]) == ("webhook-delivery (42)", "app")
    assert labels["holder"] == "pid 1234 · webhook-worker-1 · 10.0.0.5"
    assert labels["root"] == "session" and labels["pid"] == "1234"

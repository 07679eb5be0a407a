"""The status page's incident cards: the open ones first (root, numbers, next
step, runbook), then the recently resolved ones with their timelines. The
words come from ``model/incident_text``, as the notifier's do."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from lockwatch.model.findings import evidence_json
from lockwatch.model.incident_text import (
    SHOWN_FINDINGS,
    incident_lines,
    lead_kind,
    more_findings,
)
from lockwatch.model.incidents import Incident, RootKind
from lockwatch.publish.status.cells import escape, evidence_html, moment, seconds_text
from lockwatch.text import iso_utc

EVIDENCE_SHOWN = 2  # findings per card whose evidence is shown; the API has all of it
TIMELINE_SHOWN = 30  # events per card, the latest; the API has the whole timeline
TARGET_CARDS = 20  # cards of targets that cannot be sampled; the rest named in one line


def _said(incident: Incident) -> tuple[str, str]:
    """The root line, marked as the thing to act on, and the other lines as
    facts; the SQL as a block to copy."""
    root = ""
    facts: list[str] = []
    code: list[str] = []
    for said in incident_lines(incident):
        if said.label == "root":
            root = f'<p class="root"><strong class="mark">root</strong> {escape(said.text)}</p>'
        elif said.code:
            code.append(
                f'<div class="code"><span>{escape(said.label)}</span>'
                f"<pre><code>{escape(said.text)}</code></pre></div>"
            )
        else:
            facts.append(f"<div><dt>{escape(said.label)}</dt><dd>{escape(said.text)}</dd></div>")
    return root, '<dl class="facts">' + "".join(facts) + "</dl>" + "".join(code)


def _findings(incident: Incident) -> str:
    shown = incident.findings[:SHOWN_FINDINGS]
    items = "".join(
        f"<li><strong>{escape(f.kind.value)}</strong> {escape(f.subject.render())}: "
        f"{escape(f.summary)}</li>"
        for f in shown
    )
    more = more_findings(incident, SHOWN_FINDINGS)
    if more > 0:
        items += f"<li>and {more} more: all are in /api/v1/incidents/{escape(incident.id)}</li>"
    evidence = "".join(
        f"<h4>evidence of {escape(f.kind.value)}</h4>{evidence_html(evidence_json(f))}"
        for f in incident.findings[:EVIDENCE_SHOWN]
    )
    return f'<ul class="found">{items}</ul><details><summary>evidence</summary>{evidence}</details>'


def _timeline(now: datetime, incident: Incident) -> str:
    events = incident.timeline[-TIMELINE_SHOWN:]
    left_out = len(incident.timeline) - len(events)
    items = "".join(
        f"<li>{moment(now, iso_utc(event.at))} <strong>{escape(event.event.value)}</strong> "
        f"{escape(event.detail)}</li>"
        for event in events
    )
    earlier = f"<li>{left_out} earlier event(s)</li>" if left_out else ""
    return f'<ol class="timeline">{earlier}{items}</ol>'


def _card(now: datetime, incident: Incident) -> str:
    severity = escape(incident.severity.value)
    step = incident.next_step
    root, facts = _said(incident)
    if incident.open:
        when = f"opened {moment(now, iso_utc(incident.opened_at))}"
        timeline = f"<details><summary>timeline</summary>{_timeline(now, incident)}</details>"
    else:
        end = incident.resolved_at or incident.updated_at
        lasted = seconds_text((end - incident.opened_at).total_seconds())
        how = f" ({escape(incident.resolution.value)})" if incident.resolution else ""
        when = f"resolved{how} {moment(now, iso_utc(end))} after {lasted}"
        timeline = _timeline(now, incident)
    return (
        f'<article class="incident {severity}" id="incident-{escape(incident.id)}">'
        f'<h3><span class="badge">{severity}</span> {escape(incident.title)}</h3>'
        f'<p class="where">{escape(incident.target)} · {when} · incident {escape(incident.id)}</p>'
        f"{root}{facts}"
        f'<p class="runbook"><a href="{escape(step.runbook)}">runbook: '
        f"{escape(lead_kind(incident).value)}</a></p>"
        f"{_findings(incident)}{timeline}</article>"
    )


def open_section(now: datetime, incidents: Sequence[Incident]) -> str:
    if not incidents:
        return (
            '<section id="incidents"><h2>Open incidents</h2>'
            '<p class="ok">Nothing is wrong right now.</p></section>'
        )
    # A fleet that went away together: the first few of its targets' cards,
    # then one line naming the rest (/api/v1/incidents has every one whole).
    targets = [i for i in incidents if i.root.kind is RootKind.TARGET]
    folded = {i.id for i in targets[TARGET_CARDS:]} if len(targets) > TARGET_CARDS + 1 else set()
    cards = "".join(_card(now, incident) for incident in incidents if incident.id not in folded)
    if folded:
        names = ", ".join(sorted(i.target for i in targets[TARGET_CARDS:]))
        cards += (
            f'<p class="more">and {len(folded)} more incidents of targets that cannot be '
            f"sampled: <small>{escape(names)}</small></p>"
        )
    return f'<section id="incidents"><h2>Open incidents ({len(incidents)})</h2>{cards}</section>'


def resolved_section(now: datetime, incidents: Sequence[Incident]) -> str:
    if not incidents:
        return ""
    cards = "".join(_card(now, incident) for incident in incidents)
    return f'<section id="resolved"><h2>Recently resolved ({len(incidents)})</h2>{cards}</section>'

"""Open incidents as metrics: a count per severity, and one bounded series per
incident with its root's labels, so alert rules and Alertmanager group per
incident, with the numbers their descriptions quote beside it, and where
lockwatch and its runbooks are for the links in those descriptions."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from lockwatch.model.findings import Severity
from lockwatch.model.incident_text import ROOT_LABELS, root_labels
from lockwatch.model.incidents import holder_measures
from lockwatch.publish.metrics.families import Exposition, Family
from lockwatch.state.target_view import TargetView

# Open incidents exported one series each, per target, worst first; the rest
# are counted. One session holding thousands of locks is still one incident.
INCIDENT_SERIES_CAP = 50


@dataclass(frozen=True, slots=True)
class WebLinks:
    """Where people reach this lockwatch and its runbooks ("" when unknown)."""

    external_url: str = ""
    runbooks: str = ""


NO_LINKS = WebLinks()


def incident_metrics(
    views: tuple[TargetView, ...],
    scrape: Exposition,
    web: WebLinks = NO_LINKS,
    *,
    detail: bool = False,
) -> Iterator[Family]:
    links = scrape.gauge(
        "lockwatch_web_info",
        "1, labelled with this lockwatch's external URL and the base of its runbook links: "
        "what the bundled alert rules link to (absent when neither is known).",
        ["external_url", "runbooks"],
    )
    if web.external_url or web.runbooks:
        links.add((web.external_url, web.runbooks), 1.0)
    yield links
    counts = scrape.gauge(
        "lockwatch_incidents",
        "Open incidents by severity; every severity is present, 0 when none.",
        ["target", "severity"],
    )
    for view in views:
        tally = {severity: 0 for severity in Severity}
        for incident in view.incidents:
            tally[incident.severity] += 1
        for severity, count in tally.items():
            counts.add((view.target.name, severity.value), count)
    yield counts
    yield from _incident_series(views, scrape, detail)


def _incident_series(
    views: tuple[TargetView, ...], scrape: Exposition, detail: bool
) -> Iterator[Family]:
    active = scrape.gauge(
        "lockwatch_incident_active",
        f"1 for each open incident (at most {INCIDENT_SERIES_CAP} per target, worst first), "
        "labelled with its id, its root's fingerprint and kind, its leading finding kind, "
        "its severity and the root's parts (empty when unused).",
        ["target", *ROOT_LABELS],
    )
    per_incident = ["target", "incident"]
    hold = scrape.gauge(
        "lockwatch_incident_hold_seconds",
        "The longest the incident's root holder has held one of its locks; absent "
        "without a holder.",
        per_incident,
    )
    idle = scrape.gauge(
        "lockwatch_incident_holder_idle_seconds",
        "How long the incident's root holder has run no SQL; absent while it is busy.",
        per_incident,
    )
    waiters = scrape.gauge(
        "lockwatch_incident_waiters",
        "Sessions waiting on the incident's root now.",
        per_incident,
    )
    waited = scrape.gauge(
        "lockwatch_incident_waiter_seconds",
        "Seconds sessions have spent waiting on the incident's root so far, summed.",
        per_incident,
    )
    locks = scrape.gauge(
        "lockwatch_incident_locks_held",
        "The most locks the incident's root has held at once.",
        per_incident,
    )
    dropped = scrape.gauge(
        "lockwatch_incident_series_dropped",
        "Open incidents left out of lockwatch_incident_active by the per-target cap.",
        ["target"],
    )
    for view in views:
        target = view.target.name
        for incident in view.incidents[:INCIDENT_SERIES_CAP]:
            active.add((target, *root_labels(incident).values()), 1.0)
            series = (target, incident.id)
            facts = holder_measures(incident.root, incident.findings)
            if facts.hold_seconds is not None:
                hold.add(series, facts.hold_seconds)
            if facts.idle_seconds is not None:
                idle.add(series, facts.idle_seconds)
            waiters.add(series, incident.waiters)
            waited.add(series, incident.impact.waiter_seconds)
            locks.add(series, incident.impact.locks_held)
        dropped.add((target,), max(0, len(view.incidents) - INCIDENT_SERIES_CAP))
    yield from (active, hold, idle, waiters, waited, locks, dropped)
    yield _past_series_cap(views, scrape, detail)


def _past_series_cap(views: tuple[TargetView, ...], scrape: Exposition, detail: bool) -> Family:
    """What the cap left out, by severity: the bundled rule that fires on it
    carries the severity of the incidents it stands for, so a critical one
    past the cap still pages."""
    past_cap = scrape.gauge(
        "lockwatch_incidents_past_series_cap",
        "Open incidents left out of lockwatch_incident_active by the per-target cap, by "
        "severity (absent when none is, unless ?detail=full or ?target=).",
        ["target", "severity"],
    )
    for view in views:
        tally: dict[Severity, int] = {}
        for incident in view.incidents[INCIDENT_SERIES_CAP:]:
            tally[incident.severity] = tally.get(incident.severity, 0) + 1
        for severity in Severity:
            if detail or tally.get(severity):
                past_cap.add((view.target.name, severity.value), tally.get(severity, 0))
    return past_cap

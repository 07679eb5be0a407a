"""``lockwatch incidents``: the open and resolved incidents, read from the
state dir (or the shared history store) a config names, so it answers for a
postmortem after the daemon stopped. A table, ``--json`` (the shape of
``/api/v1/incidents``), or one incident whole with ``--id``."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import click

from lockwatch.commands.params import required_config
from lockwatch.config.load import ConfigError, load_settings
from lockwatch.model.incidents import Incident, IncidentState, incident_json, load_incident
from lockwatch.publish.api.encode import json_safe
from lockwatch.publish.api.incidents import (
    IncidentQuery,
    QueryError,
    incident_order,
    page_document,
    parse_since,
)
from lockwatch.settings.incidents import HistoryStore
from lockwatch.settings.targets import Settings
from lockwatch.state.incident_history import open_history
from lockwatch.state.statefile import StateStore
from lockwatch.text import format_duration, iso_utc, one_line

EXIT_BAD_CONFIG = 2
EXIT_NOT_FOUND = 1


def saved_open_incidents(settings: Settings) -> list[Incident]:
    """The open incidents each target's state file kept at its last save."""
    store = StateStore(settings.state_dir)
    found = []
    for target in settings.targets:
        document = store.load(target.name) or {}
        for entry in document.get("incidents") or []:
            incident = load_incident(entry.get("incident") if isinstance(entry, dict) else None)
            if incident is not None:
                found.append(incident)
    return found


def known_incidents(settings: Settings) -> list[Incident]:
    history = open_history(settings)
    try:
        known = {incident.id: incident for incident in history.resolved()}
    finally:
        history.close()
    for incident in saved_open_incidents(settings):
        known.setdefault(incident.id, incident)
    return list(known.values())


def _row(incident: Incident) -> str:
    resolved = iso_utc(incident.resolved_at) or "-"
    return (
        f"{incident.id:<27} {incident.state.value:<8} {incident.severity.value:<8} "
        f"{iso_utc(incident.opened_at)}  {resolved:<20}  {one_line(incident.title, 200)}"
    )


def table(incidents: list[Incident]) -> str:
    if not incidents:
        return "no incidents"
    header = f"{'ID':<27} {'STATE':<8} {'SEVERITY':<8} {'OPENED':<20}  {'RESOLVED':<20}  TITLE"
    return "\n".join([header, *(_row(incident) for incident in incidents)])


def story(incident: Incident) -> str:
    """One incident for a person: title, impact, next step, timeline."""
    impact, step = incident.impact, incident.next_step
    lines = [
        f"{incident.id}  {incident.severity.value}  {incident.state.value}",
        one_line(incident.title, 400),
        f"target {one_line(incident.target)}, opened {iso_utc(incident.opened_at)}"
        + (
            f", resolved {iso_utc(incident.resolved_at)} ({incident.resolution})"
            if incident.resolved_at
            else ""
        ),
        f"impact: {format_duration(impact.waiter_seconds)} of waiting, at most "
        f"{impact.max_waiters} waiting, at most {impact.locks_held} locks held"
        + (
            f", backlog grew by {impact.queue_growth} to {impact.max_backlog}"
            if impact.queue_growth is not None
            else ""
        )
        + (f", {impact.missed_runs} runs missed" if impact.missed_runs else ""),
        f"next step: {one_line(step.action, 400)}",
    ]
    if step.sql is not None:
        lines += [f"  {one_line(step.sql, 600)}", f"  cost: {step.cost}"]
    lines += [f"runbook: {step.runbook}", "timeline:"]
    lines += [
        f"  {iso_utc(e.at)}  {e.event.value:<16} {one_line(e.detail, 200)}"
        for e in incident.timeline
    ]
    return "\n".join(lines)


@click.command("incidents")
@required_config("The config lockwatch runs with: its state dir (or history store) is read.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (as /api/v1/incidents).")
@click.option("--since", default=None, help="Only what was open or resolved since: 1d, 2h, ISO.")
@click.option("--state", type=click.Choice([s.value for s in IncidentState]), default=None)
@click.option("--target", default=None, help="Only this target's incidents.")
@click.option("--id", "incident_id", default=None, help="One incident, whole (for a postmortem).")
def incidents(
    config_file: Path,
    as_json: bool,
    since: str | None,
    state: str | None,
    target: str | None,
    incident_id: str | None,
) -> None:
    """List the open and resolved incidents lockwatch kept."""
    try:
        settings = load_settings(config_file)
    except ConfigError as error:
        click.echo(str(error), err=True)
        sys.exit(EXIT_BAD_CONFIG)
    if settings.state_dir is None and settings.incidents.history is HistoryStore.STATE_DIR:
        click.echo("lockwatch incidents: the config has no state_dir: nothing is kept", err=True)
    known = known_incidents(settings)
    if incident_id is not None:
        found = next((i for i in known if i.id == incident_id), None)
        if found is None:
            click.echo(f"lockwatch incidents: no incident {incident_id!r} is kept", err=True)
            sys.exit(EXIT_NOT_FOUND)
        shown = json.dumps(json_safe({"incident": incident_json(found)}), ensure_ascii=False)
        click.echo(shown if as_json else story(found))
        return
    try:
        moment = None if since is None else parse_since(since, datetime.now(UTC))
    except QueryError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from None
    query = IncidentQuery(
        state=None if state is None else IncidentState(state),
        target=target,
        since=moment,
        limit=max(1, len(known)),
    )
    document = page_document(known, query)
    if as_json:
        click.echo(json.dumps(document, ensure_ascii=False, indent=2))
        return
    chosen = [i for i in sorted(known, key=incident_order) if query.admits(i)]
    click.echo(table(chosen))

"""``lockwatch incidents``: the open and resolved incidents, from the running
daemon or from what it saved in its state dir (so it answers for a
postmortem after the daemon stopped too; where it looks:
``incident_places.py``). A table, ``--json`` (the shape of
``/api/v1/incidents``), or one incident whole with ``--id``."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import click

from lockwatch.commands.incident_places import CannotLookError, Found, find_incidents
from lockwatch.config.peek import peek_places
from lockwatch.config.reader import ConfigError
from lockwatch.model.episodes import BlockingEpisode
from lockwatch.model.incidents import Incident, IncidentState, incident_json
from lockwatch.publish.api.encode import json_safe
from lockwatch.publish.api.incidents import (
    IncidentQuery,
    QueryError,
    incident_order,
    page_document,
    parse_since,
)
from lockwatch.settings.web import DEFAULT_LISTEN
from lockwatch.text import format_duration, iso_utc, one_line

EXIT_BAD_CONFIG = 2
EXIT_NOT_FOUND = 1  # no incident --id, or something could not be read
EXIT_CANNOT_LOOK = 3  # nowhere to read from: never "no incidents"


def _row(incident: Incident) -> str:
    resolved = iso_utc(incident.resolved_at) or "-"
    return (
        f"{incident.id:<27} {incident.state.value:<8} {incident.severity.value:<8} "
        f"{iso_utc(incident.opened_at)}  {resolved:<20}  {one_line(incident.title, 200)}"
    )


def table(incidents: list[Incident], source: str) -> str:
    if not incidents:
        return f"no incidents ({source})"
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
    lines += [f"runbook: {step.runbook}"]
    if incident.episodes:
        lines += ["blocking episodes:", *(f"  {episode_text(e)}" for e in incident.episodes)]
    lines += ["timeline:"]
    lines += [
        f"  {iso_utc(e.at)}  {e.event.value:<16} {one_line(e.detail, 200)}"
        for e in incident.timeline
    ]
    return "\n".join(lines)


def episode_text(episode: BlockingEpisode) -> str:
    """A blocking episode on one line: when, what it cost, the blocker, the queries."""
    how = "ended" if episode.ended else "going on"
    on = ", ".join(episode.locktypes) + (
        f" of {', '.join(episode.relations)}" if episode.relations else ""
    )
    text = (
        f"{iso_utc(episode.started_at)} for {format_duration(episode.seconds)} ({how}): "
        f"{format_duration(episode.waiter_seconds)} of waiting, at most {episode.max_waiters} "
        f"waiting on pid {episode.pid} ({on})"
    )
    if episode.blocker_xact_seconds is not None:
        text += f"; its transaction {format_duration(episode.blocker_xact_seconds)}"
    idle = episode.blocker_idle_in_transaction_seconds
    if idle is not None:
        text += f", idle in transaction {format_duration(idle)}"
    if episode.blocker_fingerprint is not None:
        text += f"; it ran: {episode.blocker_fingerprint}"
    waiters = "; ".join(f"{q.fingerprint} ({q.most_at_once})" for q in episode.waiter_queries)
    return one_line(text + (f"; the waiters ran: {waiters}" if waiters else ""), 600)


@click.command("incidents")
@click.option(
    "-c",
    "--config.file",
    "--config",
    "config_file",
    type=click.Path(path_type=Path, dir_okay=False),
    envvar="LOCKWATCH_CONFIG_FILE",
    show_envvar=True,
    default=None,
    help="The config lockwatch runs with: where it listens and keeps its state "
    "(its secrets are not read).",
)
@click.option(
    "--state-dir",
    type=click.Path(path_type=Path, file_okay=False),
    envvar="LOCKWATCH_STATE_DIR",
    show_envvar=True,
    default=None,
    help="The daemon's state dir, as it was given one (systemd: /var/lib/lockwatch).",
)
@click.option(
    "--url",
    envvar="LOCKWATCH_URL",
    show_envvar=True,
    default=None,
    help=f"The running daemon's address [default: the config's listen, or http://{DEFAULT_LISTEN}].",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (as /api/v1/incidents).")
@click.option("--since", default=None, help="Only what was open or resolved since: 1d, 2h, ISO.")
@click.option("--state", type=click.Choice([s.value for s in IncidentState]), default=None)
@click.option("--target", default=None, help="Only this target's incidents.")
@click.option("--id", "incident_id", default=None, help="One incident, whole (for a postmortem).")
def incidents(
    config_file: Path | None,
    state_dir: Path | None,
    url: str | None,
    as_json: bool,
    since: str | None,
    state: str | None,
    target: str | None,
    incident_id: str | None,
) -> None:
    """List the open and resolved incidents lockwatch kept.

    Read from the state dir given (--state-dir), else from the running daemon
    (--url, or where the config says it listens), else from the config's
    state_dir. Nothing of the daemon's is changed. Exits 0, 1 when an --id is
    not kept or something could not be read, 2 for a bad config, 3 when there
    was nowhere to look.
    """
    try:
        places = None if config_file is None else peek_places(config_file)
    except ConfigError as error:
        click.echo(str(error), err=True)
        sys.exit(EXIT_BAD_CONFIG)
    try:
        moment = None if since is None else parse_since(since, datetime.now(UTC))
    except QueryError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from None
    try:
        found = find_incidents(places, state_dir, url, incident_id)
    except CannotLookError as exc:
        click.echo(f"lockwatch incidents: could not look: {exc}", err=True)
        sys.exit(EXIT_CANNOT_LOOK)
    for note in found.notes:
        click.echo(f"lockwatch incidents: {note}", err=True)
    for problem in found.problems:
        click.echo(f"lockwatch incidents: {problem}", err=True)
    _show(
        found,
        incident_id,
        as_json,
        IncidentQuery(
            state=None if state is None else IncidentState(state),
            target=target,
            since=moment,
            limit=max(1, len(found.incidents)),
        ),
    )
    sys.exit(EXIT_NOT_FOUND if found.problems else 0)


def _show(found: Found, incident_id: str | None, as_json: bool, query: IncidentQuery) -> None:
    if incident_id is not None:
        chosen = next((i for i in found.incidents if i.id == incident_id), None)
        if chosen is None:
            click.echo(
                f"lockwatch incidents: no incident {incident_id!r} is kept ({found.source})",
                err=True,
            )
            sys.exit(EXIT_NOT_FOUND)
        shown = json.dumps(json_safe({"incident": incident_json(chosen)}), ensure_ascii=False)
        click.echo(shown if as_json else story(chosen))
        return
    if as_json:
        document = page_document(found.incidents, query)
        click.echo(json.dumps(document, ensure_ascii=False, indent=2))
        return
    chosen_ones = [i for i in sorted(found.incidents, key=incident_order) if query.admits(i)]
    click.echo(table(chosen_ones, found.source))
    if chosen_ones:
        click.echo(f"lockwatch incidents: read from {found.source}", err=True)

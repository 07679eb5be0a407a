"""``lockwatch terminate INCIDENT``: an incident's next step as one guarded
command, run by a person, never by lockwatch.

It reads the incident from the daemon's state (``lockwatch incidents``'
lookup), connects as the target's ``actions.dsn`` role (never the monitoring
role), looks at the root now and acts only when it is still the same session
(pid + backend_start) or prepared transaction (gid + xid), still holding the
incident's locks, and only with ``--yes``: without it, it says what it would
do and what that costs. Each attempt with ``--yes``, done or refused, is
appended to the target's actions file, which the daemon puts on the
incident's timeline and in its log. The exit code says which outcome it was
(``model.actions.EXIT_CODES``).
"""

from __future__ import annotations

import os
import pwd
import socket
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

import click
import psycopg
import psycopg.conninfo

from lockwatch.commands import backends
from lockwatch.commands.guard import Judgement, Look, cost, fits, judge
from lockwatch.commands.incident_places import known_incidents
from lockwatch.commands.params import required_config
from lockwatch.config.load import ConfigError, load_settings
from lockwatch.model.actions import EXIT_CODES, ActionKind, ActionRecord, Actor, Verdict
from lockwatch.model.incidents import Incident, RootKind
from lockwatch.settings.targets import Settings, Target
from lockwatch.state.actions import ActionJournal
from lockwatch.text import iso_utc, one_line

EXIT_BAD_CONFIG = 2


def find_incident(settings: Settings, incident_id: str) -> Incident | None:
    """The incident as the daemon's state keeps it now (resolved wins over a
    stale open copy): the lookup ``lockwatch incidents`` uses."""
    return next((i for i in known_incidents(settings) if i.id == incident_id), None)


def actor(role: str | None) -> Actor:
    """Who runs this: the OS user by the effective uid (not $USER, which anyone
    sets), the one sudo says ran it when that made root, the host."""
    uid = os.geteuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = f"uid {uid}"
    sudo = os.environ.get("SUDO_USER") if uid == 0 else None
    return Actor(user, sudo or None, socket.gethostname(), role)


class Attempt:
    """One run of the command: what it is about, and where outcomes go."""

    def __init__(self, incident: Incident, action: ActionKind, target: Target, yes: bool) -> None:
        self.incident, self.action, self.target, self.yes = incident, action, target, yes
        self.journal: ActionJournal | None = None
        self.role: str | None = None

    def end(self, judgement: Judgement) -> int:
        """Say how it ended, record it (with --yes) and give the exit code."""
        verdict, detail = judgement.verdict, judgement.detail
        if verdict is Verdict.DONE and not self.yes:
            click.echo(f"dry run: nothing was done. To act: add --yes ({detail})")
        elif verdict is Verdict.DONE:
            click.echo(f"done: {detail}")
        else:
            said = "failed" if verdict is Verdict.FAILED else f"refused ({verdict.value})"
            click.echo(f"lockwatch terminate: {said}: {detail}", err=True)
        if self.journal is not None:
            self.journal.append(self.record(judgement))
            click.echo(f"recorded in {self.journal.path}: the daemon puts it on the timeline")
        return EXIT_CODES[verdict]

    def record(self, judgement: Judgement) -> ActionRecord:
        root = self.incident.root
        return ActionRecord(
            id=uuid.uuid4().hex,
            at=datetime.now(UTC),
            target=self.incident.target,
            incident=self.incident.id,
            action=self.action,
            verdict=judgement.verdict,
            detail=one_line(judgement.detail, 300),
            actor=actor(self.role),
            pid=root.pid,
            backend_start=root.backend_start,
            gid=root.gid,
        )


def _plan(attempt: Attempt, look: Look) -> None:
    incident, root = attempt.incident, attempt.incident.root
    click.echo(
        f"incident {incident.id} [{incident.severity.value}] {one_line(incident.title, 300)}"
    )
    click.echo(f"target {incident.target}, via {look.server} as role {look.role.role}")
    session, prepared = look.session, look.prepared
    if session is not None:
        idle = f" for {session.state_seconds:.0f}s" if session.state_seconds is not None else ""
        click.echo(
            f"now: pid {root.pid} started {iso_utc(session.backend_start) or 'HIDDEN'}, "
            f"{session.state or 'state HIDDEN'}{idle}, role {session.usename or '-'}, "
            f"application {one_line(session.application_name or '-', 80)}"
        )
    if prepared is not None:
        click.echo(
            f"now: prepared transaction {one_line(root.gid)} xid {prepared.xid}, "
            f"prepared {iso_utc(prepared.prepared)} by {prepared.owner} in {prepared.database}"
        )
    held = ", ".join(f"{h.lock} ({h.waiters} waiting)" for h in look.held[:10]) or "none"
    click.echo(
        f"holds now: {held}" + (f" and {len(look.held) - 10} more" if len(look.held) > 10 else "")
    )
    click.echo(f"will run: {_statement(attempt)}")
    click.echo(f"cost: {cost(incident, attempt.action, look)}")


def _statement(attempt: Attempt) -> str:
    root = attempt.incident.root
    if attempt.action is ActionKind.ROLLBACK_PREPARED:
        return f"ROLLBACK PREPARED of {one_line(root.gid)}, in database {root.database or '-'}"
    call = "pg_cancel_backend" if attempt.action is ActionKind.CANCEL else "pg_terminate_backend"
    start = root.backend_start.isoformat() if root.backend_start else "-"
    return f"{call}({root.pid}), only while pid {root.pid} is the session started at {start}"


def _act(attempt: Attempt, conn: backends.Connection, wait: float) -> Judgement:
    """Run the guarded statement and wait for its effect."""
    root = attempt.incident.root
    if attempt.action is ActionKind.ROLLBACK_PREPARED:
        gid = root.gid or ""
        backends.rollback_prepared(conn, gid)
        gone = backends.wait_for(lambda: backends.prepared_gone(conn, gid), wait)
        said = "rolled back" if gone else "is still there"
        verdict = Verdict.DONE if gone else Verdict.FAILED
        return Judgement(verdict, f"prepared transaction {one_line(gid)} {said}")
    pid = int(root.pid or 0)
    if not backends.signal(conn, root, cancel=attempt.action is ActionKind.CANCEL):
        # Gone, reused or idle between the look and the act: the next look says which.
        again = judge(attempt.incident, attempt.action, backends.look(conn, root))
        if again.verdict is Verdict.DONE:
            return Judgement(Verdict.FAILED, f"pid {pid} could not be signalled")
        return again
    if attempt.action is ActionKind.CANCEL:
        done = backends.wait_for(lambda: backends.statement_done(conn, pid), wait)
        left = backends.look(conn, root).held
        still = f"; it still holds {len(left)} lock(s)" if left else "; it holds no lock now"
        verdict = Verdict.DONE if done else Verdict.FAILED
        return Judgement(verdict, f"cancelled the running statement of pid {pid}{still}")
    start = root.backend_start.isoformat() if root.backend_start else "-"
    if backends.wait_for(lambda: backends.session_gone(conn, pid, root.backend_start), wait):
        return Judgement(Verdict.DONE, f"pid {pid} (started {start}) ended")
    return Judgement(Verdict.FAILED, f"pid {pid} was signalled but still runs after {wait:g}s")


def _monitoring_role(target: Target, look: Look) -> Judgement | None:
    try:
        monitor = psycopg.conninfo.conninfo_to_dict(target.dsn).get("user")
    except psycopg.ProgrammingError:
        return None
    if monitor and str(monitor) == look.role.role:
        return Judgement(
            Verdict.DENIED,
            f"actions.dsn connects as {look.role.role}, lockwatch's monitoring role, which stays "
            "read-only: give actions a role of its own",
        )
    return None


def run_attempt(attempt: Attempt, dsn: str) -> int:
    """Connect, look, judge, and act when it is right to."""
    root = attempt.incident.root
    database = root.database if root.kind is RootKind.PREPARED else None
    try:
        conn = backends.connect(dsn, database)
    except backends.ActionError as exc:
        return attempt.end(Judgement(Verdict.FAILED, f"cannot connect: {exc}"))
    with conn:
        try:
            look = backends.look(conn, root)
            attempt.role = look.role.role
            _plan(attempt, look)
            judgement = _monitoring_role(attempt.target, look) or judge(
                attempt.incident, attempt.action, look
            )
            if judgement.verdict is Verdict.DONE and attempt.yes:
                judgement = _act(attempt, conn, attempt.target.actions.wait)
        except psycopg.errors.InsufficientPrivilege as exc:
            judgement = Judgement(Verdict.DENIED, str(backends.failure(dsn, exc)))
        except psycopg.Error as exc:
            judgement = Judgement(Verdict.FAILED, str(backends.failure(dsn, exc)))
    return attempt.end(judgement)


def _action(cancel: bool, rollback_prepared: bool) -> ActionKind:
    if cancel and rollback_prepared:
        raise click.UsageError("--cancel and --rollback-prepared exclude each other")
    if rollback_prepared:
        return ActionKind.ROLLBACK_PREPARED
    return ActionKind.CANCEL if cancel else ActionKind.TERMINATE


@click.command("terminate")
@click.argument("incident_id", metavar="INCIDENT")
@required_config("The config lockwatch runs with: its state dir and the target's actions.dsn.")
@click.option("--yes", is_flag=True, help="Act. Without it: a dry run that says what it would do.")
@click.option(
    "--cancel", is_flag=True, help="pg_cancel_backend: cancel the root's running statement."
)
@click.option(
    "--rollback-prepared",
    is_flag=True,
    help="ROLLBACK PREPARED the prepared transaction at the root (its changes are undone).",
)
def terminate(
    incident_id: str, config_file: Path, yes: bool, cancel: bool, rollback_prepared: bool
) -> None:
    """End an incident's root: pg_terminate_backend of the session holding its
    locks, guarded by its pid and backend_start. A dry run unless --yes; each
    attempt with --yes goes on the incident's timeline. Exit codes: 0 done (or
    would be), 1 failed, 2 bad config, 3 no such incident, 4 resolved, 5 gone,
    6 pid reused, 7 role cannot see the session, 8 role may not act, 9 locks
    released, 10 action does not fit the root, 11 cannot be recorded."""
    action = _action(cancel, rollback_prepared)
    try:
        settings = load_settings(config_file)
    except ConfigError as error:
        click.echo(str(error), err=True)
        sys.exit(EXIT_BAD_CONFIG)
    incident = find_incident(settings, incident_id)
    if incident is None:
        click.echo(f"lockwatch terminate: no incident {incident_id!r} is kept", err=True)
        sys.exit(EXIT_CODES[Verdict.NOT_FOUND])
    target = next((t for t in settings.targets if t.name == incident.target), None)
    if target is None or target.actions.dsn is None:
        why = "is not in the config" if target is None else "has no actions.dsn (or dsn_file)"
        click.echo(f"lockwatch terminate: target {incident.target} {why}", err=True)
        sys.exit(EXIT_BAD_CONFIG)
    attempt = Attempt(incident, action, target, yes)
    if yes:
        try:
            attempt.journal = _journal(settings, target)
        except OSError as exc:
            click.echo(
                f"lockwatch terminate: refused ({Verdict.UNRECORDED.value}): the action could "
                f"not be recorded, so it is not done: {exc.strerror or exc}; run it as the user "
                "lockwatch runs as (or root)",
                err=True,
            )
            sys.exit(EXIT_CODES[Verdict.UNRECORDED])
    try:
        refusal = fits(incident, action)
        sys.exit(attempt.end(refusal) if refusal else run_attempt(attempt, target.actions.dsn))
    finally:
        if attempt.journal is not None:
            attempt.journal.close()


def _journal(settings: Settings, target: Target) -> ActionJournal:
    if settings.state_dir is None:
        raise OSError(0, "the config has no state_dir, where the daemon reads actions")
    return ActionJournal(settings.state_dir, target.name)

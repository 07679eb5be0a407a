"""``lockwatch doctor --dsn DSN``: is session state safe on this connection string?

Checks the DSN the way an application uses it, and says how long a backend of
its role whose client vanished keeps its advisory locks on that server. An
application's DSN is judged for the application: its role needs nothing of
lockwatch's (``--monitoring`` checks lockwatch's own DSN, whose role needs
pg_monitor). A second session holds a
transaction open while the first runs another statement: on a direct
connection (or a session pool) the first session keeps its own backend; on a
transaction or statement pool it gets another backend, or waits for one — and
then session advisory locks, SET, LISTEN, SQL PREPARE, WITH HOLD cursors and
temporary tables cannot be trusted on it (seed 000).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import click
import psycopg

from lockwatch.commands.params import DSN
from lockwatch.commands.tracking import tracking_notes
from lockwatch.detect.keepalive import describe, orphan_lifetime, timeouts_for
from lockwatch.model.keepalive import OrphanLifetime, PoolerTimeouts
from lockwatch.model.locks import HIDDEN
from lockwatch.model.pooler import POOLED_SESSION_LOSSES
from lockwatch.sample.keepalive import pooler_timeouts, server_settings
from lockwatch.sample.pooling import backend_pid, per_transaction, through_pooler
from lockwatch.settings.serverless import serverless_provider
from lockwatch.settings.targets import Target
from lockwatch.util.secrets import describe_dsn, dsn_secrets, first_line, redact

EXIT_SAFE = 0
EXIT_POOLED = 1
EXIT_ERROR = 2
# --monitoring only: not pooled, but lockwatch on this DSN would not see other
# roles' sessions (an application's role needs no pg_monitor).
EXIT_NO_MONITOR = 3
UNSAFE_ON_POOLING = (
    "session advisory locks, SET, LISTEN, SQL PREPARE, WITH HOLD cursors and temp tables"
)
LOCKWATCH_ON_POOLING = (
    "lockwatch works on this DSN (pg_locks read through a transaction pooler is right), "
    "but give it a direct DSN so that its session stays one backend; meanwhile "
    + "; ".join(POOLED_SESSION_LOSSES)
)


@dataclass(frozen=True, slots=True)
class Diagnosis:
    where: str
    pooled: bool
    evidence: str
    server_version: str
    role: str
    can_monitor: bool
    notes: tuple[str, ...] = field(default=())
    orphans: OrphanLifetime | None = None
    monitoring: bool = False  # the DSN is lockwatch's own: its role needs pg_monitor

    @property
    def exit_code(self) -> int:
        if self.pooled:
            return EXIT_POOLED
        return EXIT_SAFE if self.can_monitor or not self.monitoring else EXIT_NO_MONITOR

    def render(self) -> str:
        verdict = (
            f"POOLED: {self.evidence}. Unsafe on this DSN: {UNSAFE_ON_POOLING}. "
            "Take leader locks over a direct DSN (or a session pool), or use "
            "pg_advisory_xact_lock inside one transaction."
            if self.pooled
            else f"SAFE for session state: {self.evidence}."
        )
        monitor = (
            "yes"
            if self.can_monitor
            else "no — lockwatch needs pg_monitor: other roles' sessions are "
            f"{HIDDEN}; GRANT pg_monitor TO {self.role}"
        )
        lines = [
            f"lockwatch doctor: {self.where}",
            f"  server version      {self.server_version}",
            f"  role                {self.role}",
            *([f"  role has pg_monitor {monitor}"] if self.monitoring else []),
            f"  verdict             {verdict}",
            *(f"  note                {note}" for note in self.notes),
            *_orphan_lines(self.orphans),
        ]
        return "\n".join(lines)


def _orphan_lines(orphans: OrphanLifetime | None) -> list[str]:
    """How long a backend whose client vanished keeps its advisory locks here."""
    if orphans is None:
        return []
    return [
        f"  orphan lifetime     {describe(orphans)}",
        *(f"  assumed             {assumed}" for assumed in orphans.assumed),
        *(f"  shorten it with     {advice}" for advice in orphans.shorten),
    ]


def _pooler_timeouts(admin_dsn: str | None, pooled: bool) -> PoolerTimeouts | None:
    """pgbouncer's limits from its admin console; without one, a pooler whose
    limits are unknown when the DSN is pooled per transaction."""
    if admin_dsn is None:
        return PoolerTimeouts(None, None, "transaction", known=False) if pooled else None
    secrets = dsn_secrets(admin_dsn)
    try:
        with psycopg.connect(
            admin_dsn, autocommit=True, connect_timeout=5, cursor_factory=psycopg.ClientCursor
        ) as admin:
            timeouts = pooler_timeouts(admin)
    except psycopg.Error as exc:
        where = describe_dsn(admin_dsn)
        raise RuntimeError(redact(f"pgbouncer {where}: {first_line(exc)}", secrets)) from None
    if pooled and timeouts.pool_mode not in ("transaction", "statement"):
        # This DSN's pool overrides the default mode: the doctor saw it share backends.
        return PoolerTimeouts(timeouts.server_lifetime, timeouts.server_idle_timeout, "transaction")
    return timeouts


def _connect(dsn: str) -> psycopg.Connection[Any]:
    # No server-side prepared statements: a transaction pool would break them.
    return psycopg.connect(
        dsn,
        autocommit=True,
        connect_timeout=5,
        prepare_threshold=None,
        application_name="lockwatch-doctor",
    )


def diagnose(dsn: str, pgbouncer: str | None = None, *, monitoring: bool = False) -> Diagnosis:
    """The DSN as an application's (``monitoring``: as lockwatch's own, whose
    role needs pg_monitor). Raises RuntimeError with a secret-free message when
    the DSN (or the pgbouncer admin DSN) does not work."""
    secrets = dsn_secrets(dsn)
    try:
        with _connect(dsn) as first, _connect(dsn) as second:
            row = first.execute(
                "SELECT current_setting('server_version'), current_user,"
                " pg_has_role(current_user, 'pg_monitor', 'USAGE')"
                " OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user),"
                " session_user, current_database()"
            ).fetchone()
            assert row is not None
            version, role, can_monitor = str(row[0]), str(row[1]), bool(row[2])
            server_pid = backend_pid(first)
            proxied = through_pooler(first, server_pid)
            sharing = per_transaction(first, second)
            # What a session of this DSN's role starts with on this server.
            timeouts = timeouts_for(server_settings(first), str(row[3]), str(row[4]))
            tracking = tracking_notes(first)
    except psycopg.Error as exc:
        raise RuntimeError(redact(f"{describe_dsn(dsn)}: {first_line(exc)}", secrets)) from None
    pooled = sharing is not None
    evidence = sharing or f"one session kept backend pid {server_pid} across transactions"
    return Diagnosis(
        describe_dsn(dsn),
        pooled,
        evidence,
        version,
        role,
        can_monitor,
        _notes(pooled=pooled, proxied=proxied, monitoring=monitoring)
        + _serverless_note(dsn)
        + tracking,
        orphan_lifetime(timeouts, _pooler_timeouts(pgbouncer, pooled)),
        monitoring,
    )


def _notes(*, pooled: bool, proxied: bool, monitoring: bool) -> tuple[str, ...]:
    """What the verdict means for lockwatch's own session on this DSN."""
    if not monitoring:
        return ()
    if pooled:
        return (LOCKWATCH_ON_POOLING,)
    if proxied:
        return (
            "a pooler or proxy answers this DSN (its backend key is not the server's pid), "
            "but each session kept its backend: a session pool is fine for lockwatch",
        )
    return ()


def _serverless_note(dsn: str) -> tuple[str, ...]:
    address = dsn_address(dsn)
    provider = None if address is None else serverless_provider(address[0])
    if provider is None:
        return ()
    return (
        f"the host is {provider}'s, whose compute sleeps when idle: mark its lockwatch "
        "target `serverless: true`, or lockwatch's polls keep it awake",
    )


def dsn_address(dsn: str) -> tuple[str, str] | None:
    try:
        parts = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return None
    return str(parts.get("host") or "localhost"), str(parts.get("port") or "5432")


def pooled_dsn_hints(targets: Iterable[Target]) -> list[str]:
    """What ``check-config`` can tell without connecting: a target whose DSN
    points at the address of its own pgbouncer admin console, the pooler.
    (A port alone, 6432 say, proves nothing; ``doctor`` tells for sure.)

    >>> from lockwatch.settings.pooler import PoolerSpec
    >>> pooler = PoolerSpec("host=db port=6432 dbname=pgbouncer")
    >>> pooled_dsn_hints([Target("main", "host=db port=6432 dbname=app", pgbouncer=pooler)])[0][:46]
    'target main: its DSN (db:6432/app) goes to the'
    >>> pooled_dsn_hints([Target("main", "host=db port=5432 dbname=app", pgbouncer=pooler)])
    []
    """
    hints = []
    for target in targets:
        address = dsn_address(target.dsn)
        if address is None:
            continue
        pooler = dsn_address(target.pgbouncer.dsn) if target.pgbouncer is not None else None
        if address != pooler:
            continue
        hints.append(
            f"target {target.name}: its DSN ({describe_dsn(target.dsn)}) goes to the address of "
            "its pgbouncer admin console, through the pooler. lockwatch works through a "
            "transaction pooler, but give it a direct DSN so that its session stays one "
            "backend; `lockwatch doctor --dsn ...` tells which pool mode it gets"
        )
    return hints


@click.command()
@click.option(
    "--dsn", envvar="LOCKWATCH_DSN", required=True, type=DSN, help="The DSN your application uses."
)
@click.option(
    "--pgbouncer", type=DSN, help="pgbouncer's admin DSN: its server_lifetime bounds an orphan."
)
@click.option(
    "--monitoring",
    is_flag=True,
    help="The DSN is lockwatch's own: its role must also have pg_monitor (exit 3 without).",
)
def doctor(dsn: str, pgbouncer: str | None, monitoring: bool) -> None:
    """Check whether a DSN is safe for session state (exit 0), pooled per transaction (1)
    or broken (2), and how long an orphan of its role lives on its server. With
    --monitoring, for lockwatch's own DSN: 3 when safe but its role lacks pg_monitor."""
    try:
        diagnosis = diagnose(dsn, pgbouncer, monitoring=monitoring)
    except RuntimeError as exc:
        click.echo(f"lockwatch doctor: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    click.echo(diagnosis.render())
    sys.exit(diagnosis.exit_code)

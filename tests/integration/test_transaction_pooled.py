"""lockwatch's own DSN through pgbouncer in ``pool_mode=transaction`` (issue 18,
part 2): it polls there, prepares nothing and sets nothing on backends that
other clients get, and says once that it should be given a direct DSN."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from lockwatch.cli import main
from lockwatch.model.evidence import LockEvidence, TransactionPooledEvidence
from lockwatch.model.findings import FindingKind
from lockwatch.model.incidents import IncidentChanges
from lockwatch.publish.status.page import POOLED_NOTE, StatusPage
from lockwatch.runner import TargetRunner
from lockwatch.sample.session import _ANNOUNCED
from lockwatch.settings.locks import LockSettings
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from tests.fixtures.evidence import evidence_as
from tests.fixtures.incident_values import ToldFindings
from tests.fixtures.pgbouncer import STATS_USER, PgBouncer
from tests.fixtures.postgres import PgDatabase, wait_until

pytestmark = pytest.mark.pg

POOLED = FindingKind.TARGET_TRANSACTION_POOLED


@pytest.fixture
def bouncer(pg: PgDatabase) -> Iterator[PgBouncer]:
    """pgbouncer in transaction mode; ``app`` logs in with pg_monitor, as lockwatch's
    role would, and may write, as the application sharing the pool does."""
    with psycopg.connect(pg.server.dsn(), autocommit=True) as admin:
        for role in ("app", STATS_USER):
            exists = admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
            if not exists:
                admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        admin.execute("GRANT pg_monitor TO app")
        admin.execute(
            sql.SQL("GRANT ALL ON DATABASE {} TO app").format(sql.Identifier(pg.database))
        )
        with psycopg.connect(pg.admin_dsn, autocommit=True) as db:
            db.execute("GRANT ALL ON SCHEMA public TO app")
    with PgBouncer(pg.server, pool_mode="transaction", pool_size=2) as running:
        yield running


class Clock:
    """lockwatch's own time, wall and monotonic together, moved forward by the
    test: hold times (lockwatch's own measure) age with it."""

    def __init__(self) -> None:
        self.offset = timedelta(0)

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def monotonic(self) -> float:
        return time.monotonic() + self.offset.total_seconds()


def pooled_runner(
    pg: PgDatabase,
    bouncer: PgBouncer,
    clock: Clock,
    listeners: tuple[Callable[[IncidentChanges], None], ...] = (),
    max_hold: float = 60.0,
) -> TargetRunner:
    target = Target(
        "main",
        bouncer.dsn(pg.database, user="app"),
        interval=1.0,
        locks=LockSettings(max_hold=max_hold),
    )
    return TargetRunner(
        target, Board(), StateStore(None), clock, listeners, monotonic=clock.monotonic
    )


def test_lockwatch_polls_through_the_pooler_and_says_so_once(
    pg: PgDatabase, bouncer: PgBouncer, caplog: pytest.LogCaptureFixture
) -> None:
    holder = pg.connect("webhook-worker-1")
    holder.execute("SELECT pg_advisory_lock(42)")
    clock = Clock()
    # A first lockwatch prepares its statements on a backend and goes away, as a
    # restart does: before the fix, the next one failed every poll with
    # 'prepared statement "_pg3_0" already exists' on that backend.
    first = pooled_runner(pg, bouncer, clock)
    assert first.poll_once().up
    first.close()
    _ANNOUNCED.clear()  # a restart is a new process
    caplog.clear()

    fired: list[FindingKind] = []
    resolved: list[FindingKind] = []

    told = ToldFindings()

    def listen(changes: IncidentChanges) -> None:
        now_fired, now_resolved = told(changes)
        fired.extend(f.kind for f in now_fired)
        resolved.extend(f.kind for f in now_resolved)

    caplog.set_level(logging.INFO, logger="lockwatch")
    # Hold times are lockwatch's own measure, in real time: a short budget.
    runner = pooled_runner(pg, bouncer, clock, listeners=(listen,), max_hold=1.0)
    try:
        for _ in range(6):
            view = runner.poll_once()
            assert view.up, view.status
            runner.session.close()  # every reconnect lands wherever the pooler likes
        view = wait_until(
            lambda: (
                (now := runner.poll_once()).up
                and any(f.kind is FindingKind.LOCK_HELD_TOO_LONG for f in now.findings)
                and now
            ),
            message="lock 42 held too long, read through the pooler",
        )
    finally:
        runner.close()

    assert runner.session.through_pooler and not runner.session.prepare
    assert fired.count(POOLED) == 1 and POOLED not in resolved
    held = [f for f in view.findings if f.kind is FindingKind.LOCK_HELD_TOO_LONG]
    assert [evidence_as(f, LockEvidence).holder_pid for f in held] == [holder.info.backend_pid]
    (finding,) = [f for f in view.findings if f.kind is POOLED]
    assert finding.severity.value == "warning"
    assert "direct DSN" in finding.summary
    assert "per transaction" in evidence_as(finding, TransactionPooledEvidence).evidence
    assert any(
        "prepares no statement" in line
        for line in evidence_as(finding, TransactionPooledEvidence).meanwhile
    )
    # The session says so once; the finding's firing is a line of its own (the
    # runner logs its findings, as the daemon did).
    said = [
        message
        for r in caplog.records
        if "transaction pooler" in (message := r.getMessage()) and not message.startswith("firing ")
    ]
    assert len(said) == 1, said
    assert "direct DSN" in said[0]


def test_nothing_lockwatch_sets_stays_on_the_applications_backends(
    pg: PgDatabase, bouncer: PgBouncer
) -> None:
    runner = pooled_runner(pg, bouncer, Clock())
    with psycopg.connect(
        bouncer.dsn(pg.database, user="app"), autocommit=True, prepare_threshold=None
    ) as app:
        try:
            for _ in range(3):
                assert runner.poll_once().up
            # lockwatch's own statements still run with its settings.
            (mine,) = runner.session.query(
                "SELECT current_setting('statement_timeout') AS st,"
                " current_setting('transaction_read_only') AS ro,"
                " current_setting('work_mem') AS wm"
            )
            assert mine == {"st": "5s", "ro": "on", "wm": "32MB"}
        finally:
            runner.close()
        # Before: lockwatch's default_transaction_read_only and statement_timeout
        # stayed on the backends, and the application's writes failed there.
        for _ in range(4):
            app.execute("CREATE TABLE IF NOT EXISTS t (x int)")
            app.execute("INSERT INTO t VALUES (1)")
            row = app.execute("SELECT current_setting('default_transaction_read_only')").fetchone()
            assert row == ("off",)
            row = app.execute("SELECT current_setting('statement_timeout')").fetchone()
            assert row == ("0",)


def test_the_status_page_says_it_under_the_target(pg: PgDatabase, bouncer: PgBouncer) -> None:
    board = Board()
    target = Target("main", bouncer.dsn(pg.database, user="app"), interval=1.0)
    runner = TargetRunner(target, board, StateStore(None), Clock())
    try:
        assert runner.poll_once().up
    finally:
        runner.close()
    page = StatusPage(board, clock=lambda: datetime.now(UTC)).render()
    assert POOLED_NOTE.split(":")[0] in page


def test_a_direct_dsn_keeps_its_settings_and_raises_nothing(pg: PgDatabase) -> None:
    runner = TargetRunner(Target("main", pg.monitor_dsn), Board(), StateStore(None), Clock())
    try:
        view = runner.poll_once()
        assert view.up
        assert view.findings == ()
        assert not runner.session.through_pooler and runner.session.prepare
        rows = runner.session.query("SELECT current_setting('statement_timeout') AS t")
        assert rows == [{"t": "5s"}]
    finally:
        runner.close()


def test_doctor_tells_lockwatch_to_take_a_direct_dsn(pg: PgDatabase, bouncer: PgBouncer) -> None:
    result = CliRunner().invoke(
        main, ["doctor", "--monitoring", "--dsn", bouncer.dsn(pg.database, user="app")]
    )
    assert result.exit_code == 1, result.output
    assert "POOLED" in result.output
    assert "lockwatch works on this DSN" in result.output
    assert "direct DSN" in result.output


def test_check_config_notes_a_dsn_on_its_own_poolers_address(
    pg: PgDatabase, bouncer: PgBouncer, tmp_path: Path
) -> None:
    config = tmp_path / "lockwatch.yml"
    config.write_text(
        "targets:\n"
        "  - name: main\n"
        f"    dsn: {bouncer.dsn(pg.database, user='app')!r}\n"
        "    pgbouncer:\n"
        f"      dsn: {bouncer.admin_dsn()!r}\n"
        "  - name: direct\n"
        f"    dsn: {pg.monitor_dsn!r}\n"
    )
    result = CliRunner().invoke(main, ["check-config", str(config)])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if "note:" in line]
    assert len(notes) == 1, result.output
    assert "target main" in notes[0] and "direct DSN" in notes[0]
    assert "pw-" not in result.output

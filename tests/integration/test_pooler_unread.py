"""A real pgbouncer in transaction mode whose admin console lockwatch does not
read (issue 25 item 8): a backend holding a session lock whose pooling cannot
be told is "backend N, client unknown", never its last client's name, until
it is found pooled. Ground truth: a superuser's look at pg_locks and
pg_stat_activity shows the trap (the holder's backend bears the name of a
client that never took the lock)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from lockwatch.model.evidence import LockEvidence
from lockwatch.model.findings import Finding, FindingKind
from lockwatch.runner import TargetRunner
from lockwatch.settings.locks import LockSettings
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from lockwatch.state.target_view import TargetView
from tests.fixtures.evidence import evidence_as
from tests.fixtures.pgbouncer import PgBouncer
from tests.fixtures.postgres import PgDatabase, advisory_holders, wait_until
from tests.integration.test_pooler import backend_application, bouncer, scheduler

pytestmark = pytest.mark.pg

__all__ = ["bouncer"]  # test_pooler's fixture, used here

KEY = 7777
WEB = ("web-1", "web-2")


def runner_for(pg: PgDatabase, dsn: str, *, clients_through_pooler: bool) -> TargetRunner:
    locks = LockSettings(orphan_after=0.5, clients_through_pooler=clients_through_pooler)
    return TargetRunner(Target("main", dsn, locks=locks), Board(), StateStore(None))


def take_and_leave(dsn: str, conns: list[psycopg.Connection[Any]]) -> None:
    """A nightly job takes the session lock through the pool and goes away:
    the lock stays on the pooler's backend."""
    job = scheduler(dsn, "nightly-job", conns)
    assert job.execute("SELECT pg_try_advisory_lock(%s)", (KEY,)).fetchone() == (True,)
    job.close()


def orphaned(view: TargetView) -> Finding | None:
    return next((f for f in view.findings if f.kind is FindingKind.LOCK_ORPHANED), None)


def until_orphaned(runner: TargetRunner, what: str) -> TargetView:
    def poll() -> TargetView | None:
        view = runner.poll_once()
        return view if orphaned(view) else None

    return wait_until(poll, message=what)


def told(view: TargetView) -> str:
    """Who the view says holds the lock: the incidents' titles and the
    summaries that name a holder (lock_pooled_session's may quote the names
    it saw change, as the pool's clients, never as the holder)."""
    return "\n".join(
        [f.summary for f in view.findings if f.kind is not FindingKind.LOCK_POOLED_SESSION]
        + [i.title for i in view.incidents]
    )


def assert_client_unknown(view: TargetView, pid: int) -> None:
    finding = orphaned(view)
    assert finding is not None
    (holder,) = evidence_as(finding, LockEvidence).holders
    assert holder.pid == pid and holder.application_name is None and holder.client_addr is None
    assert holder.pooled is not None
    (incident,) = [i for i in view.incidents if i.root.pid == pid]
    assert incident.root.client_unknown and incident.root.application_name is None
    assert incident.title.startswith(f"backend {pid}, client unknown"), incident.title
    assert not any(name in told(view) for name in WEB), told(view)


def test_one_pool_client_is_never_named_as_the_holder(pg: PgDatabase, bouncer: PgBouncer) -> None:
    dsn = bouncer.dsn(pg.database, user="scheduler")
    conns: list[psycopg.Connection[Any]] = []
    unknown = runner_for(pg, pg.monitor_dsn, clients_through_pooler=True)
    naive = runner_for(pg, pg.monitor_dsn, clients_through_pooler=False)
    try:
        take_and_leave(dsn, conns)
        web = scheduler(dsn, "web-1", conns)
        web.execute("SELECT 1")  # the pool's one client is handed the holder's backend
        (pid,) = advisory_holders(pg.admin_dsn, KEY)
        assert backend_application(pg, pid) == "web-1", "the trap: the holder bears web-1's name"
        view = until_orphaned(unknown, "lock_orphaned on the pooled backend")
        for _ in range(3):  # web-1 keeps the backend busy: one name, nothing to infer from
            assert_client_unknown(view, pid)
            web.execute("SELECT 1")
            view = unknown.poll_once()
        assert_client_unknown(view, pid)
        assert not any(f.kind is FindingKind.LOCK_POOLED_SESSION for f in view.findings)
        # Told that clients come directly, lockwatch names the backend's
        # client, as it must for a direct session: the setting is what differs.
        naive_view = until_orphaned(naive, "lock_orphaned, clients taken as direct")
        assert "web-1" in told(naive_view)
    finally:
        unknown.close()
        naive.close()
        for conn in conns:
            conn.close()


def test_two_pool_clients_are_never_named_before_or_after_the_pool_is_inferred(
    pg: PgDatabase, bouncer: PgBouncer
) -> None:
    dsn = bouncer.dsn(pg.database, user="scheduler")
    conns: list[psycopg.Connection[Any]] = []
    runner = runner_for(pg, pg.monitor_dsn, clients_through_pooler=True)
    turns = iter(range(1000))
    try:
        take_and_leave(dsn, conns)
        (pid,) = advisory_holders(pg.admin_dsn, KEY)
        clients = [scheduler(dsn, name, conns) for name in WEB]

        def turn() -> TargetView | None:
            # One server: the pool lends the holder's backend to each in turn.
            clients[next(turns) % 2].execute("SELECT 1", prepare=False)
            view = runner.poll_once()
            assert not any(name in told(view) for name in WEB), told(view)
            if orphaned(view) is None:
                return None
            assert_client_unknown(view, pid)
            inferred = any(f.kind is FindingKind.LOCK_POOLED_SESSION for f in view.findings)
            return view if inferred else None

        view = wait_until(turn, message="the backend inferred pooled, its orphan told")
        # collected for docs/benchmarks.md: every poll judged, none named a client
        print(f"detection pgbouncer two clients: inferred pooled after {next(turns)} polls")
    finally:
        runner.close()
        for conn in conns:
            conn.close()
    (pooled,) = [f for f in view.findings if f.kind is FindingKind.LOCK_POOLED_SESSION]
    assert "a pooler's (inferred: its application_name changed" in pooled.summary


def test_lockwatch_through_the_pooler_takes_its_clients_as_possibly_pooled(
    pg: PgDatabase, bouncer: PgBouncer
) -> None:
    """No setting: lockwatch's own DSN goes through a pooler, so may the clients'."""
    with psycopg.connect(pg.server.dsn(), autocommit=True) as admin:
        admin.execute("GRANT pg_monitor TO app")
    dsn = bouncer.dsn(pg.database, user="scheduler")
    conns: list[psycopg.Connection[Any]] = []
    runner = runner_for(pg, bouncer.dsn(pg.database, user="app"), clients_through_pooler=False)
    try:
        take_and_leave(dsn, conns)
        scheduler(dsn, "web-1", conns).execute("SELECT 1")
        (pid,) = advisory_holders(pg.admin_dsn, KEY)
        assert backend_application(pg, pid) == "web-1"
        view = until_orphaned(runner, "lock_orphaned read through the pooler")
        assert runner.session.through_pooler
        assert_client_unknown(view, pid)
    finally:
        runner.close()
        for conn in conns:
            conn.close()

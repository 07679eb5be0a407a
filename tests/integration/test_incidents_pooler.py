"""Seed 000 through a real pgbouncer in transaction mode, told as an incident:
the backend holding the leader lock is its root whether or not pgbouncer's view
of it is read, and its next step is the pooler's fix."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from lockwatch.detect.incidents import tell_incidents
from lockwatch.detect.locks import detect_locks
from lockwatch.model.findings import FindingKind
from lockwatch.model.incidents import RootKind
from lockwatch.model.locks import LockSnapshot
from lockwatch.model.next_step import POOLED_FIX
from lockwatch.model.remediation import terminate_sql
from lockwatch.sample.base import SampleContext
from lockwatch.settings.locks import LockSettings
from tests.fixtures.incident_values import worded
from tests.fixtures.pgbouncer import PgBouncer
from tests.fixtures.postgres import PgDatabase
from tests.integration.test_pooler import Watcher, bouncer, scheduler, try_lead, watcher

pytestmark = pytest.mark.pg
__all__ = ["bouncer", "watcher"]  # the fixtures, shared with test_pooler


def test_the_pooled_leader_lock_is_one_incident_with_the_pooler_s_fix(
    pg: PgDatabase, bouncer: PgBouncer, watcher: Watcher
) -> None:
    conns: list[psycopg.Connection[Any]] = []
    try:
        first = scheduler(bouncer.dsn(pg.database, user="scheduler"), "app-1", conns)
        second = scheduler(bouncer.dsn(pg.database, user="scheduler"), "app-2", conns)
        assert try_lead(first) and try_lead(second)

        raw = watcher.locks.sample()
        now = datetime.now(UTC)
        pool = watcher.pooler.sample(SampleContext(now, None))
        locks = watcher.tracker.observe(raw.locks, raw.backends, now)
        snapshot = LockSnapshot("main", now, raw.server_version, locks, raw.backends)
        with_pooler = detect_locks(snapshot, LockSettings(), now, pool)
        without = detect_locks(snapshot, LockSettings(max_hold=0.001), now)
        assert {f.kind for f in with_pooler} == {FindingKind.LOCK_POOLED_SESSION}

        (told,) = tell_incidents(with_pooler, snapshot)
        assert told.root.kind is RootKind.POOLED_BACKEND
        assert told.root.backend_start is not None
        title, step = worded(told)
        assert step.action.startswith(POOLED_FIX)
        assert step.sql == terminate_sql(told.root.pid or 0, told.root.backend_start)
        assert step.runbook.endswith("#lockwatchlockpooledsession")
        assert "on a transaction-pooled backend" in title

        (plain,) = tell_incidents(without, snapshot)
        assert plain.root.kind is RootKind.SESSION
        assert plain.root.fingerprint == told.root.fingerprint
    finally:
        for conn in conns:
            conn.close()

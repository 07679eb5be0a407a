"""lock_migration_running: a migration tool locks and migrates on one session,
so its statements are the lock's own work: a long migration is said as such,
never as an orphan or a lock to end (issue 25, finding 1)."""

from __future__ import annotations

from datetime import timedelta

from lockwatch.detect.incidents import tell_incidents
from lockwatch.detect.locks import detect_locks
from lockwatch.model.catalogue import node_pg_migrate
from lockwatch.model.findings import Finding, FindingKind, Severity
from lockwatch.settings.locks import LockSettings, NamedLock
from tests.fixtures.incident_values import worded
from tests.fixtures.snapshots import NOW, backend, held, snapshot, waiting

MIGRATE_KEY = node_pg_migrate.KEY
MIGRATOR = 4100
SETTINGS = LockSettings(max_hold=600.0, orphan_after=600.0)


def migrating(held_for: float, **session: object) -> list[Finding]:
    """node-pg-migrate's lock, taken ``held_for`` seconds ago by a session
    that has run the migration's statements since (its query started later)."""
    deploys = session.pop("deploys", 0)
    assert isinstance(deploys, int)
    migrator = backend(
        MIGRATOR, "node-pg-migrate", state_for=30, query="ALTER TABLE orders ADD COLUMN x int"
    )
    if session:
        migrator = backend(MIGRATOR, "node-pg-migrate", **session)  # type: ignore[arg-type]
    waiters = [waiting(MIGRATE_KEY, 5000 + n, waited_for=100) for n in range(deploys)]
    snap = snapshot(
        held(MIGRATE_KEY, MIGRATOR, held_for=held_for),
        *waiters,
        backends=[migrator, *(backend(w.pid, "deploy") for w in waiters)],
    )
    return detect_locks(snap, SETTINGS, NOW)


def kinds(findings: list[Finding]) -> set[FindingKind]:
    return {f.kind for f in findings}


def test_a_working_migration_past_orphan_after_is_not_an_orphan() -> None:
    # The old rule: held past orphan_after by a session that ran other statements.
    assert FindingKind.LOCK_ORPHANED not in kinds(migrating(held_for=700))


def test_a_long_migration_is_its_own_finding_with_its_deploys_waiting() -> None:
    findings = migrating(held_for=42 * 60, deploys=3)
    (finding,) = [f for f in findings if f.kind is FindingKind.LOCK_MIGRATION_RUNNING]
    assert FindingKind.LOCK_HELD_TOO_LONG not in kinds(findings)
    assert finding.summary.startswith(
        f"migration node-pg-migrate ({MIGRATE_KEY.render()}) in app running for 42m"
    )
    assert "running 'ALTER TABLE orders ADD COLUMN x int'" in finding.summary
    assert "3 deploy(s) waiting for it" in finding.summary
    assert finding.severity is Severity.WARNING
    assert finding.since == NOW - timedelta(seconds=42 * 60) + timedelta(seconds=600)


def test_a_migration_within_its_budget_raises_nothing_of_its_own() -> None:
    assert FindingKind.LOCK_MIGRATION_RUNNING not in kinds(migrating(held_for=300))


def test_a_migration_blocked_on_a_table_with_deploys_queued_is_critical() -> None:
    findings = migrating(held_for=700, deploys=2, waits_on=[777])
    (finding,) = [f for f in findings if f.kind is FindingKind.LOCK_MIGRATION_RUNNING]
    assert finding.severity is Severity.CRITICAL
    assert "itself waiting on pid 777" in finding.summary


def test_a_migration_session_left_idle_is_still_an_orphan() -> None:
    findings = migrating(held_for=1300, idle_for=700)
    assert FindingKind.LOCK_ORPHANED in kinds(findings)


def test_the_next_step_never_ends_the_migration() -> None:
    findings = migrating(held_for=42 * 60, deploys=3)
    snap = snapshot(held(MIGRATE_KEY, MIGRATOR, held_for=42 * 60), backends=[backend(MIGRATOR)])
    (group,) = tell_incidents(findings, snap)
    _, step = worded(group)
    assert step.sql is None
    assert "let the migration finish" in step.action
    assert "do not end the migration's session" in step.action


def test_a_named_lock_in_the_config_is_judged_as_any_key() -> None:
    settings = LockSettings(
        max_hold=600.0, named=(NamedLock("schema-lock", MIGRATE_KEY, max_hold=60.0),)
    )
    snap = snapshot(
        held(MIGRATE_KEY, MIGRATOR, held_for=120), backends=[backend(MIGRATOR, state_for=10)]
    )
    assert kinds(detect_locks(snap, settings, NOW)) == {FindingKind.LOCK_HELD_TOO_LONG}

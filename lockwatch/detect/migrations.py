"""``lock_migration_running``: a migration tool's lock held past its budget
while its session runs the migration.

Every catalogued migration tool (Rails, golang-migrate, Flyway, goose, SQLx,
Prisma, node-pg-migrate) takes its advisory lock and runs the migration's
statements on the same session. Those statements are the lock's own work:
they neither make the lock an orphan (which "held while its session runs
other statements" means for a pooled client lent to other work) nor call for
ending the session, which would leave a migration half applied. A long
migration is said as what it is: how long it runs, what it runs or waits on,
and how many deploys queue behind it.

The lock detectors ask this module two things of a key's group: whether it
is a migration's (``migration_lock``), and its finding (``migration_running``).
Pure.
"""

from __future__ import annotations

import functools
from datetime import datetime, timedelta

from lockwatch.detect.lock_groups import (
    Draft,
    Holder,
    KeyGroup,
    budgets,
    doing,
    lock_evidence,
    who,
)
from lockwatch.model.catalogue import KnownLock, Purpose
from lockwatch.model.evidence import LockEvidence
from lockwatch.model.findings import FindingKind, Severity
from lockwatch.model.locks import LockSnapshot
from lockwatch.settings.locks import LockSettings
from lockwatch.text import format_duration, one_line


def migration_lock(group: KeyGroup, settings: LockSettings) -> KnownLock | None:
    """The catalogue's migration tool whose lock the group's key is, unless a
    named lock in the config says otherwise."""
    if group.database is None or group.on_purpose is not None:
        return None
    known = settings.catalogue_entry(group.database, group.key)
    return known if known is not None and known.purpose is Purpose.MIGRATION else None


def _what(holder: Holder) -> str:
    """What the migration's session does now, for a summary."""
    backend = holder.backend
    if backend is None or not backend.visible or holder.waits or holder.idle is not None:
        return doing(holder)
    query = one_line(backend.query or "", 80)
    return f"running {query!r}" if query else doing(holder)


def migration_running(
    group: KeyGroup, settings: LockSettings, snapshot: LockSnapshot, now: datetime
) -> Draft | None:
    """The key's migration held past its budget (the key's ``max_hold``,
    learned when ``auto``): its own finding, in place of held too long."""
    known = migration_lock(group, settings)
    budget, _ = budgets(group, settings)
    holder = max(group.holders, key=lambda h: (h.held, -h.lock.pid), default=None)
    if known is None or budget is None or holder is None or holder.held <= budget:
        return None
    assert holder.lock.first_seen is not None  # a positive hold has a start
    deploys = len(group.waiters)

    def summary() -> str:
        waiting = f", {deploys} deploy(s) waiting for it" if deploys else ""
        return (
            f"migration {group.label()} in {one_line(group.database)} running for "
            f"{format_duration(holder.held)} on {who(holder)}, {_what(holder)}{waiting}; "
            f"budget {format_duration(budget)}"
        )

    @functools.cache
    def evidence() -> LockEvidence:
        return lock_evidence(group, settings, snapshot, now, holder)

    # Blocked on another session's lock with deploys queued: nothing moves.
    stuck = holder.waits and deploys > 0
    return Draft(
        FindingKind.LOCK_MIGRATION_RUNNING,
        group,
        Severity.CRITICAL if stuck else Severity.WARNING,
        holder.lock.first_seen + timedelta(seconds=budget),
        summary,
        evidence,
        holder=holder,
    )

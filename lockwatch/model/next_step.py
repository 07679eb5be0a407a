"""What to do about an incident's root: its next step, the guarded SQL that
does it (printed for a person, never run by lockwatch) and what running it
costs, with the runbook of the incident's leading kind. The names in it come
from ``model/incident_text.py``, as every other word of an incident does."""

from __future__ import annotations

from collections.abc import Sequence

from lockwatch.model.evidence import PooledLockEvidence, TargetDownEvidence
from lockwatch.model.findings import Finding, FindingKind
from lockwatch.model.incident_text import (
    HOLDING,
    TITLE_LIMIT,
    holder_text,
    lead_finding,
    runbook_link,
)
from lockwatch.model.incidents import IncidentRoot, NextStep, RootKind
from lockwatch.text import one_line

TERMINATE_COST = (
    "its open transaction rolls back, its client gets an error on its next statement "
    "(and may retry the work), and every lock of its session is released at once"
)
ROLLBACK_PREPARED_COST = (
    "the prepared transaction's changes are undone and its locks released; "
    "COMMIT PREPARED instead keeps its work, if it should stand"
)
POOLED_FIX = (
    "give session-level advisory locks a direct DSN to PostgreSQL (or a pgbouncer pool in "
    "session mode); to free the lock now, end the backend holding it"
)
# A migration's session is doing the lock's own work: ending it leaves the
# migration half applied (all of it, where the tool runs it in one transaction).
MIGRATION_STEP = (
    "let the migration finish: see what it runs (its query) and, if it waits on a lock, "
    "what holds that lock (the chain), and end that instead; hold further deploys until it "
    "is done; do not end the migration's session"
)
_JOB_ACTIONS = {
    FindingKind.JOB_DUPLICATE_START: "make its runs exclusive per run key (a unique constraint "
    "on the run key), then look at who started the second run",
    FindingKind.JOB_OVERLAP: "let one run finish or stop the other; then make runs exclusive",
    FindingKind.JOB_MISSED: "check its scheduler: a scheduled run did not start",
    FindingKind.JOB_TOO_LONG: "look at the run going past its limit: hung, or slower than allowed",
    FindingKind.JOB_FAILED: "read the failed run's log and run it again once fixed",
}


def sql_literal(text: str) -> str:
    """``text`` as a PostgreSQL string literal, whatever standard_conforming_strings says.

    >>> sql_literal("it's")
    "'it''s'"
    >>> sql_literal("a\\\\b")
    "E'a\\\\\\\\b'"
    """
    quoted = text.replace("'", "''")
    if "\\" in text:
        return "E'" + quoted.replace("\\", "\\\\") + "'"
    return f"'{quoted}'"


def terminate_sql(root: IncidentRoot) -> str:
    """End one session, guarded against the pid's reuse by a later session.

    >>> from datetime import datetime, UTC
    >>> start = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    >>> terminate_sql(IncidentRoot(RootKind.SESSION, "main", pid=7023, backend_start=start))
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = 7023 AND backend_start = '2026-12-01T12:00:00+00:00';"
    """
    if root.backend_start is not None:
        guard = f"backend_start = {sql_literal(root.backend_start.isoformat())}"
    elif root.application_name is not None:
        guard = f"application_name = {sql_literal(root.application_name)}"
    else:
        guard = "state <> 'active'"
    pid = int(root.pid or 0)
    # Printed for a person, never run; its one text value is quoted by sql_literal.
    return f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = {pid} AND {guard};"  # noqa: S608


def _holder_step(root: IncidentRoot, findings: Sequence[Finding], runbook: str) -> NextStep:
    if root.kind is RootKind.PREPARED:
        database = f" in database {one_line(root.database)}" if root.database else ""
        return NextStep(
            f"roll back the prepared transaction {one_line(root.gid)}{database} (it has no "
            "session to end: it holds its locks until COMMIT or ROLLBACK PREPARED)",
            f"ROLLBACK PREPARED {sql_literal(root.gid or '')};",
            ROLLBACK_PREPARED_COST,
            runbook,
        )
    if any(f.kind is FindingKind.LOCK_MIGRATION_RUNNING for f in findings):
        return NextStep(MIGRATION_STEP, None, None, runbook)
    pooled = root.kind is RootKind.POOLED_BACKEND or any(
        isinstance(f.evidence, PooledLockEvidence) for f in findings
    )
    action = POOLED_FIX if pooled else f"end the session of {holder_text(root)}: its locks go free"
    cost = TERMINATE_COST + ("; pgbouncer opens a new server connection" if pooled else "")
    return NextStep(action, terminate_sql(root), cost, runbook)


def next_step(
    root: IncidentRoot, findings: Sequence[Finding], lead: FindingKind, runbooks: str
) -> NextStep:
    """What to do about the root, and the runbook of the incident's leading kind."""
    runbook = runbook_link(runbooks, lead.value)
    if root.kind in HOLDING:
        return _holder_step(root, findings, runbook)
    finding = lead_finding(findings, lead)
    if root.kind is RootKind.QUEUE:
        action = (
            f"look at the workers of queue {one_line(root.queue)}: it grows while they "
            "complete little (stuck on a call, a lock, or gone)"
        )
    elif root.kind is RootKind.JOB:
        action = f"job {one_line(root.job)}: {_JOB_ACTIONS.get(lead, 'see its runbook')}"
    elif root.kind is RootKind.LOCK:
        action = f"find why nobody holds lock {one_line(root.lock)}: start its holder (a leader)"
        if lead is not FindingKind.LEADER_LOCK_MISSING:
            action = f"find the holder of lock {one_line(root.lock)}: lockwatch did not see it"
    elif lead is FindingKind.TARGET_TRANSACTION_POOLED:
        action = "point the target's DSN at PostgreSQL directly, past the transaction pooler"
    else:
        evidence = finding.evidence
        error = evidence.error if isinstance(evidence, TargetDownEvidence) else ""
        action = f"make it answer again{': ' + one_line(error, TITLE_LIMIT) if error else ''}"
    return NextStep(action, None, None, runbook)

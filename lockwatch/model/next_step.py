"""What to do about an incident's root: its next step, the guarded SQL that
does it (``model/remediation.py``: printed for a person, never run by
lockwatch) and what running it costs, with the runbook of the incident's
leading kind. The names in it come from ``model/incident_text.py``, as every
other word of an incident does."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from lockwatch.model.evidence import LockWaitEvidence, PooledLockEvidence, TargetDownEvidence
from lockwatch.model.findings import MORE_HOLDERS_SUBJECT, Finding, FindingKind
from lockwatch.model.incident_text import (
    TITLE_LIMIT,
    holder_text,
    lead_finding,
    runbook_link,
)
from lockwatch.model.incidents import (
    HOLDING,
    IncidentRoot,
    Measures,
    NextStep,
    RootKind,
    holder_measures,
)
from lockwatch.model.remediation import (
    GUARD_ROLES,
    cancel_sql,
    linked_client,
    rollback_prepared_sql,
    terminate_cost,
    terminate_sql,
)
from lockwatch.text import one_line

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


def _terminate_step(
    root: IncidentRoot,
    findings: Sequence[Finding],
    incident_id: str,
    runbook: str,
    measures: Measures,
) -> NextStep:
    """End the session at the root: ``lockwatch terminate``, or the guarded SQL
    as the roles the runbooks name; what it costs follows the holder's state
    as lockwatch saw it."""
    pooled = root.kind is RootKind.POOLED_BACKEND or any(
        isinstance(f.evidence, PooledLockEvidence) for f in findings
    )
    end = POOLED_FIX if pooled else f"end the session of {holder_text(root)}: its locks go free"
    seen = measures.holder
    state, xact = (seen.state, seen.xact_seconds) if seen is not None else (None, None)
    client = linked_client(findings) if pooled else None
    cost = f"as lockwatch saw it ({one_line(state or 'state not seen')}): " + terminate_cost(
        state, xact, pooled=pooled, linked_client=client
    )
    if root.backend_start is None:
        action = (
            f"{end}. lockwatch did not see when pid {root.pid} started (its role lacks "
            "pg_monitor), so no guarded statement can tell it from a later session with its "
            f"pid: look at pid {root.pid} in pg_stat_activity as a role with pg_read_all_stats "
            "before you end it"
        )
        return NextStep(action, None, cost, runbook)
    action = (
        f"{end}. Guarded: lockwatch terminate {incident_id} -c FILE (a dry run; --yes acts), "
        f"or the SQL below as a role with {GUARD_ROLES}: it says whether it ended the "
        "session or why not (gone, pid reused, hidden from your role, locks released)"
    )
    return NextStep(action, terminate_sql(int(root.pid or 0), root.backend_start), cost, runbook)


def _holder_step(
    root: IncidentRoot,
    findings: Sequence[Finding],
    incident_id: str,
    runbook: str,
    measures: Measures,
) -> NextStep:
    if root.kind is RootKind.PREPARED:
        database = f" in database {one_line(root.database)}" if root.database else ""
        return NextStep(
            f"roll back the prepared transaction {one_line(root.gid)}{database} (it has no "
            "session to end: it holds its locks until COMMIT or ROLLBACK PREPARED); "
            f"lockwatch terminate {incident_id} -c FILE --rollback-prepared checks it first",
            rollback_prepared_sql(root.gid or ""),
            ROLLBACK_PREPARED_COST,
            runbook,
        )
    if any(f.kind is FindingKind.LOCK_MIGRATION_RUNNING for f in findings):
        return NextStep(MIGRATION_STEP, None, None, runbook)
    step = _terminate_step(root, findings, incident_id, runbook, measures)
    queued = _queued_statement(findings)
    if queued is None:
        return step
    pid, started = queued
    # Either frees the queue: cancelling the waiting statement loses nothing
    # done yet, ending the root loses its open transaction's work.
    return replace(
        step,
        action=(
            f"cancel the statement waiting for its strong lock (pid {pid}) with the SQL "
            f"below as a role with {GUARD_ROLES}: {cancel_sql(pid, started)} - or {step.action}. "
            "Run migrations under a lock_timeout (SET lock_timeout = '5s', and retry) so one "
            "that cannot get its lock fails fast instead of queueing every query behind it"
        ),
    )


def _queued_statement(findings: Sequence[Finding]) -> tuple[int, datetime] | None:
    """The pid and session start of a lock_queue's waiting strong lock."""
    for finding in findings:
        evidence = finding.evidence
        if finding.kind is FindingKind.LOCK_QUEUE and isinstance(evidence, LockWaitEvidence):
            waiting = evidence.waiting
            if waiting is not None and waiting.backend_start is not None:
                return waiting.pid, waiting.backend_start
    return None


def next_step(
    root: IncidentRoot,
    findings: Sequence[Finding],
    lead: FindingKind,
    runbooks: str,
    incident_id: str = "<incident id>",
    measures: Measures | None = None,
) -> NextStep:
    """What to do about the root, and the runbook of the incident's leading
    kind. ``measures``: the root holder's in ``findings``, when the caller has
    them already."""
    runbook = runbook_link(runbooks, lead.value)
    if root.kind in HOLDING:
        facts = holder_measures(root, findings) if measures is None else measures
        return _holder_step(root, findings, incident_id, runbook, facts)
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
        if root.lock == MORE_HOLDERS_SUBJECT:
            # Holders past the number told one by one: each is counted, none named.
            action = (
                "list the sessions holding advisory locks (lockwatch snapshot, /api/v1/locks): "
                "more of them hold locks past their budget than are told one by one; "
                "so many usually share one cause (a deploy, a pool)"
            )
        elif lead is not FindingKind.LEADER_LOCK_MISSING:
            action = f"find the holder of lock {one_line(root.lock)}: lockwatch did not see it"
    elif lead is FindingKind.TARGET_TRANSACTION_POOLED:
        action = "point the target's DSN at PostgreSQL directly, past the transaction pooler"
    else:
        evidence = finding.evidence
        error = evidence.error if isinstance(evidence, TargetDownEvidence) else ""
        action = f"make it answer again{': ' + one_line(error, TITLE_LIMIT) if error else ''}"
    return NextStep(action, None, None, runbook)

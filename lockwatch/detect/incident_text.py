"""An incident's words: the title that names its root, and the next step.

Pure. Values that come from database clients (application names, prepared
transactions' gids) are made one line in titles and quoted as SQL literals in
the remediation SQL, which lockwatch prints and never runs.
"""

from __future__ import annotations

from collections.abc import Sequence

from lockwatch.model.evidence import (
    HolderFacts,
    LockEvidence,
    PooledLockEvidence,
    QueueStallEvidence,
    TargetDownEvidence,
)
from lockwatch.model.findings import Finding, FindingKind
from lockwatch.model.incidents import (
    SEVERITY_RANK,
    IncidentRoot,
    NextStep,
    RootKind,
    RootLoad,
    runbook_link,
)
from lockwatch.model.locks import IDLE_STATES
from lockwatch.text import format_duration, one_line

_KIND_RANK = {kind: rank for rank, kind in enumerate(FindingKind)}

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


def leading(findings: Sequence[Finding]) -> Finding:
    """The finding an incident is told by: the most severe, then the kind first declared."""
    return min(findings, key=lambda f: (SEVERITY_RANK[f.severity], _KIND_RANK[f.kind]))


def _who(root: IncidentRoot) -> str:
    if root.kind is RootKind.PREPARED:
        return f"prepared transaction {one_line(root.gid)}"
    name = f" {one_line(root.application_name)}" if root.application_name else ""
    return f"pid {root.pid}{name}"


def _lock_label(evidence: LockEvidence) -> str:
    key = one_line(evidence.key)
    return f"{one_line(evidence.name)} ({key})" if evidence.name else key


def _root_holder(root: IncidentRoot, findings: Sequence[Finding]) -> HolderFacts | None:
    for finding in findings:
        evidence = finding.evidence
        if isinstance(evidence, LockEvidence):
            for holder in evidence.holders:
                if holder.pid == root.pid or (
                    holder.prepared is not None and holder.prepared.gid == root.gid
                ):
                    return holder
    return None


def _holds_text(findings: Sequence[Finding], load: RootLoad | None) -> str:
    labels = [
        _lock_label(f.evidence)
        for f in findings
        if isinstance(f.evidence, LockEvidence) and f.evidence.holder_pid is not None
    ]
    stalls = [f.evidence.lock for f in findings if isinstance(f.evidence, QueueStallEvidence)]
    first = labels[0] if labels else next((one_line(s.lock) for s in stalls if s), None)
    count = load.locks_held if load is not None else len(dict.fromkeys(labels))
    if first is None:
        return f"holds {count} advisory locks" if count else "holds advisory locks"
    return f"holds {count} locks ({first}, …)" if count > 1 else f"holds {first}"


def _holder_title(
    root: IncidentRoot, findings: Sequence[Finding], load: RootLoad | None, waiters: int
) -> str:
    parts = [f"{_who(root)} {_holds_text(findings, load)}"]
    holder = _root_holder(root, findings)
    if holder is not None and holder.state in IDLE_STATES and holder.state_seconds is not None:
        parts.append(f"{one_line(holder.state)} {format_duration(holder.state_seconds)}")
    if waiters:
        parts.append(f"{waiters} waiting")
    kinds = {f.kind for f in findings}
    if FindingKind.LOCK_POOLED_SESSION in kinds:
        parts.append("on a transaction-pooled backend")
    if FindingKind.LOCK_UNEXPECTED_HOLDER in kinds:
        parts.append("not an allowed holder")
    for finding in findings:
        if finding.kind is FindingKind.QUEUE_STALLED:
            parts.append(f"queue {one_line(finding.subject.queue)} stalled")
    return ", ".join(parts)


def incident_title(
    root: IncidentRoot, findings: Sequence[Finding], load: RootLoad | None, waiters: int
) -> str:
    """One line naming the root first, then what matters most about it."""
    if root.kind in (RootKind.SESSION, RootKind.POOLED_BACKEND, RootKind.PREPARED):
        return _holder_title(root, findings, load, waiters)
    lead = leading(findings)
    if root.kind is RootKind.QUEUE:
        kinds = {f.kind for f in findings}
        if not kinds & {FindingKind.QUEUE_STALLED, FindingKind.QUEUE_GROWING}:
            return one_line(lead.summary)  # its jobs' trouble: the summary names the queue
        state = "stalled" if FindingKind.QUEUE_STALLED in kinds else "growing"
        return f"queue {one_line(root.queue)} {state}: {one_line(lead.summary)}"
    if root.kind is RootKind.JOB:
        return f"job {one_line(root.job)}: {one_line(lead.summary)}"
    if root.kind is RootKind.LOCK:
        return f"lock {one_line(root.lock)}: {one_line(lead.summary)}"
    source = f" source {one_line(root.source)}" if root.source else ""
    return f"target {one_line(root.target)}{source}: {one_line(lead.summary)}"


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
    action = POOLED_FIX if pooled else f"end the session of {_who(root)}: its locks go free"
    cost = TERMINATE_COST + ("; pgbouncer opens a new server connection" if pooled else "")
    return NextStep(action, terminate_sql(root), cost, runbook)


def next_step(root: IncidentRoot, findings: Sequence[Finding], runbook_base: str) -> NextStep:
    """What to do about the root, and the runbook of the incident's leading kind."""
    lead = leading(findings)
    runbook = runbook_link(runbook_base, lead.kind)
    if root.kind in (RootKind.SESSION, RootKind.POOLED_BACKEND, RootKind.PREPARED):
        return _holder_step(root, findings, runbook)
    if root.kind is RootKind.QUEUE:
        action = (
            f"look at the workers of queue {one_line(root.queue)}: it grows while they "
            "complete little (stuck on a call, a lock, or gone)"
        )
    elif root.kind is RootKind.JOB:
        action = f"job {one_line(root.job)}: {_JOB_ACTIONS.get(lead.kind, 'see its runbook')}"
    elif root.kind is RootKind.LOCK:
        action = f"find why nobody holds lock {one_line(root.lock)}: start its holder (a leader)"
        if lead.kind is not FindingKind.LEADER_LOCK_MISSING:
            action = f"find the holder of lock {one_line(root.lock)}: lockwatch did not see it"
    elif lead.kind is FindingKind.TARGET_TRANSACTION_POOLED:
        action = "point the target's DSN at PostgreSQL directly, past the transaction pooler"
    else:
        error = lead.evidence.error if isinstance(lead.evidence, TargetDownEvidence) else ""
        action = f"make it answer again{': ' + one_line(error) if error else ''}"
    return NextStep(action, None, None, runbook)

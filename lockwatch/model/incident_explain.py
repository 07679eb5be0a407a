"""An incident explained in plain words, by lockwatch itself from its
evidence (no language model): what the root is, what it does to whom and
since when, why that is a problem, what it cost, and what to do about it.

Pure: the incident as the API serves it (secrets redacted there) in, text out.
``lockwatch mcp`` gives it to agents; a person reads the same.
"""

from __future__ import annotations

from datetime import datetime

from lockwatch.model.evidence import LockEvidence, QueueStallEvidence
from lockwatch.model.findings import FindingKind
from lockwatch.model.incident_text import impact_text, incident_lines, lead_kind, root_text
from lockwatch.model.incidents import HOLDING_SESSIONS, Incident, RootKind
from lockwatch.model.remediation import SQL_LIMIT
from lockwatch.text import format_duration, iso_utc, one_line

TIMELINE_SHOWN = 12  # the latest timeline events the explanation lists
FINDINGS_SHOWN = 6

# Why each kind matters, in one clause: what it means for the system.
_MEANING = {
    FindingKind.LOCK_HELD_TOO_LONG: "a lock is held past its budget, so whatever needs it waits",
    FindingKind.LOCK_CONVOY: "sessions queue on a held lock and do nothing else meanwhile",
    FindingKind.LOCK_ORPHANED: "the holder runs no SQL: it will not let go by itself",
    FindingKind.LOCK_POOLED_SESSION: "a session-level lock sits on a backend a transaction "
    "pooler lends to other clients: it is anybody's and nobody's",
    FindingKind.LOCK_UNEXPECTED_HOLDER: "the lock is held by a session it was not meant for",
    FindingKind.LOCK_MIGRATION_RUNNING: "a schema migration holds its tool's lock for long: "
    "deploys wait on it; let it finish",
    FindingKind.LOCK_QUEUE: "a strong lock (DDL, LOCK TABLE, ...) waits behind a holder and "
    "every later query on the table queues behind it: an outage from a statement that takes "
    "milliseconds",
    FindingKind.ROW_LOCK_CONVOY: "sessions wait on a row one session holds: workers stall "
    "behind it",
    FindingKind.IDLE_IN_TRANSACTION_BLOCKER: "a session idle in transaction holds locks others "
    "wait on: it will not let go until its client ends the transaction",
    FindingKind.LEADER_LOCK_MISSING: "nobody holds the leader lock: the leader's work is not done",
    FindingKind.LEADER_LOCK_CHURN: "the leader lock changes hands too often",
    FindingKind.QUEUE_GROWING: "work arrives faster than it is done",
    FindingKind.QUEUE_STALLED: "work waits while the workers burn almost no CPU: they are stuck",
    FindingKind.JOB_STUCK_RUNNING: "jobs are marked running but their worker is gone",
    FindingKind.JOB_RESCUED_WHILE_RUNNING: "a job was handed to a second worker while it runs",
    FindingKind.QUEUE_NO_CONSUMER: "work waits and nothing consumes the queue: no worker is alive",
    FindingKind.QUEUE_JOB_TOO_LONG: "a job runs far longer than its task ever does: its handler "
    "is likely hung, holding a worker slot",
    FindingKind.QUEUE_CAPACITY_LOST: "the queue completes far less than it used to while work "
    "waits: consumers are gone or stuck on a few jobs, long before a full stop",
    FindingKind.JOB_DUPLICATE_START: "a job started twice for the same run",
    FindingKind.JOB_OVERLAP: "two runs of a job run at once",
    FindingKind.JOB_MISSED: "a scheduled run did not start",
    FindingKind.JOB_TOO_LONG: "a run goes on past its limit",
    FindingKind.JOB_FAILED: "a run failed",
    FindingKind.TARGET_DOWN: "lockwatch cannot read the target: nothing of it is watched",
    FindingKind.TARGET_TRANSACTION_POOLED: "lockwatch's own session goes through a transaction "
    "pooler, so what it reads may be another backend's",
    FindingKind.TARGET_PRIVILEGES_MISSING: "lockwatch's role cannot see every session",
}


def _age(start: datetime, end: datetime) -> str:
    return format_duration(max(0.0, (end - start).total_seconds()))


def _status(incident: Incident) -> str:
    opened = iso_utc(incident.opened_at)
    if incident.open:
        lasted = _age(incident.opened_at, incident.updated_at)
        return f"open since {opened} ({lasted} as of {iso_utc(incident.updated_at)})"
    resolved = incident.resolved_at or incident.updated_at
    how = f": {incident.resolution.value}" if incident.resolution else ""
    return f"resolved at {iso_utc(resolved)} after {_age(incident.opened_at, resolved)}{how}"


def _chain(incident: Incident) -> list[str]:
    """The because-sentences the evidence supports, root first."""
    said = []
    kinds = set(incident.kinds)
    root = incident.root
    for finding in incident.findings:
        evidence = finding.evidence
        if isinstance(evidence, QueueStallEvidence) and evidence.lock is not None:
            lock = evidence.lock
            said.append(
                f"Queue {one_line(finding.subject.queue)} stalls because its workers wait on "
                f"lock {one_line(lock.lock)} in {one_line(lock.database)}."
            )
    if root.kind in HOLDING_SESSIONS or root.kind is RootKind.PREPARED:
        who = root_text(root)
        if incident.waiters:
            said.append(f"{incident.waiters} session(s) wait now on locks {who} holds.")
        if FindingKind.LOCK_ORPHANED in kinds or _idle_holder(incident):
            said.append(
                f"{who} runs no SQL while it holds them, so it will not let go until its "
                "client acts or its session ends (a call without a timeout, a lost client, "
                "a crash between lock and unlock)."
            )
        if root.kind is RootKind.PREPARED:
            said.append(
                "A prepared transaction has no session: it keeps its locks, even across "
                "restarts, until COMMIT PREPARED or ROLLBACK PREPARED."
            )
    return said


def _idle_holder(incident: Incident) -> bool:
    for finding in incident.findings:
        evidence = finding.evidence
        if isinstance(evidence, LockEvidence):
            for holder in evidence.holders:
                if holder.pid == incident.root.pid and (holder.state or "").startswith("idle"):
                    return True
    return False


def _next(incident: Incident) -> list[str]:
    step = incident.next_step
    lines = [f"Next step: {one_line(step.action, 400)}"]
    root = incident.root
    if incident.open and (root.kind in HOLDING_SESSIONS or root.kind is RootKind.PREPARED):
        flag = " --rollback-prepared" if root.kind is RootKind.PREPARED else ""
        lines.append(
            f"A person can do it with `lockwatch terminate -c <config> {incident.id}{flag}`: "
            "a dry run that re-checks the root and says what it costs; --yes acts."
        )
    if step.sql and incident.open:
        lines.append(f"Or by hand: {one_line(step.sql, SQL_LIMIT)}")
    if step.cost and incident.open:
        lines.append(f"Cost: {one_line(step.cost, 400)}")
    lines.append(f"Runbook: {step.runbook}")
    return lines


def explain(incident: Incident) -> str:
    """The incident in a few paragraphs, from its own evidence."""
    lead = lead_kind(incident)
    parts = [
        one_line(incident.title, 400),
        f"{incident.severity.value.capitalize()} incident {incident.id} on target "
        f"{one_line(incident.target)}, {_status(incident)}.",
        f"It began as {lead.value}: {_MEANING.get(lead, lead.value)}.",
    ]
    parts += _chain(incident)
    facts = [f"  {said.label}: {one_line(said.text, 400)}" for said in incident_lines(incident)]
    parts += ["What lockwatch saw:", *facts] if facts else []
    shown = incident.findings[:FINDINGS_SHOWN]
    parts.append(f"Findings ({max(incident.finding_count, len(incident.findings))}):")
    parts += [
        f"  {f.kind.value} [{f.severity.value}] since {iso_utc(f.since)}: "
        f"{one_line(f.summary, 300)}"
        for f in shown
    ]
    impact = impact_text(incident.impact)
    if impact:
        parts.append(f"Cost so far: {impact}.")
    if incident.open:
        parts += _next(incident)
    else:
        parts.append(f"Runbook: {incident.next_step.runbook}")
    events = incident.timeline[-TIMELINE_SHOWN:]
    parts.append("Timeline:")
    parts += [f"  {iso_utc(e.at)} {e.event.value}: {one_line(e.detail, 300)}" for e in events]
    return "\n".join(parts)

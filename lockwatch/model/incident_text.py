"""An incident told to people: the words the notifier and the status page share.

Each surface formats these lines its own way (Telegram HTML, Slack mrkdwn, a
status-page card), so an incident reads the same everywhere. Values that came
from database clients are returned as they are; every surface escapes them
for its format.
"""

from __future__ import annotations

from dataclasses import dataclass

from lockwatch.model.findings import FindingKind
from lockwatch.model.incidents import Impact, Incident, IncidentRoot, RootKind
from lockwatch.text import client_address, format_duration, one_line, printable

SHOWN_FINDINGS = 5  # findings listed per incident; the API has them all
LABEL_LIMIT = 80  # characters of a label value from a database client

# The labels an open incident's alert carries, the same in lockwatch_incident_active
# and in the webhook payload of lockwatch's own notifications. ``kind`` is the
# leading kind (it names the alert); ``job_name``, as Prometheus owns ``job``.
ROOT_LABELS = (
    "incident",
    "fingerprint",
    "root",
    "kind",
    "severity",
    "database",
    "lock",
    "queue",
    "job_name",
    "source",
    "pid",
    "application",
)


@dataclass(frozen=True, slots=True)
class Said:
    """One line of an incident for people: a label, its text, and whether the
    text is code (SQL) to be shown verbatim."""

    label: str
    text: str
    code: bool = False


@dataclass(frozen=True, slots=True)
class Measures:
    """The numbers an alert description and a card show about a holder's
    incident, read from its findings' evidence; None when no finding says."""

    hold_seconds: float | None = None  # the longest the root holder has held a lock
    idle_seconds: float | None = None  # how long the root holder has run no SQL
    waiters: int | None = None  # sessions waiting behind it now
    query: str | None = None  # the root holder's last query


def lead_kind(incident: Incident) -> FindingKind:
    """The kind that opened the incident: it names its alert and runbook for
    as long as it is open, whatever joins later."""
    if incident.kinds:
        return incident.kinds[0]
    return incident.findings[0].kind


def root_labels(incident: Incident) -> dict[str, str]:
    """The incident's labels by ROOT_LABELS, "" where unused; values from database
    clients on one bounded, encodable line."""
    root = incident.root
    values = {
        "incident": incident.id,
        "fingerprint": incident.fingerprint,
        "root": root.kind.value,
        "kind": lead_kind(incident).value,
        "severity": incident.severity.value,
        "database": root.database or "",
        "lock": root.lock or "",
        "queue": root.queue or "",
        "job_name": root.job or "",
        "source": root.source or "",
        "pid": "" if root.pid is None else str(root.pid),
        "application": root.application_name or "",
    }
    return {name: printable(one_line(values[name], LABEL_LIMIT)) for name in ROOT_LABELS}


def root_text(root: IncidentRoot) -> str:
    """The root as people know it.

    >>> root_text(IncidentRoot(RootKind.SESSION, "main", pid=7023, application_name="worker-4"))
    'pid 7023 · worker-4 · local socket'
    >>> root_text(IncidentRoot(RootKind.QUEUE, "main", queue="webhooks"))
    'queue webhooks on main'
    """
    if root.kind in (RootKind.SESSION, RootKind.POOLED_BACKEND) and root.pid is not None:
        where = client_address(root.client_addr, root.client_port, root.client_hostname)
        names = (root.application_name or "-", where)
        return " · ".join((f"pid {root.pid}", *(one_line(n, LABEL_LIMIT) for n in names)))
    if root.kind is RootKind.PREPARED:
        return f"prepared transaction {root.gid or '-'}"
    for word, value in (("queue", root.queue), ("job", root.job), ("lock", root.lock)):
        if value:
            return f"{word} {value} on {root.target}"
    return f"target {root.target}" + (f" ({root.source})" if root.source else "")


def impact_text(impact: Impact) -> str | None:
    """What the incident cost, in one line; None when nothing was counted.

    >>> impact_text(Impact(waiter_seconds=130.0, max_waiters=5, locks_held=4001))
    'at most 5 waiting · 2m10s of waiting · 4001 locks held'
    >>> impact_text(Impact()) is None
    True
    """
    parts = []
    if impact.max_waiters:
        parts.append(f"at most {impact.max_waiters} waiting")
    if impact.waiter_seconds >= 1:
        parts.append(f"{format_duration(impact.waiter_seconds)} of waiting")
    if impact.locks_held > 1:
        parts.append(f"{impact.locks_held} locks held")
    if impact.queue_growth:
        backlog = "" if impact.max_backlog is None else f" (backlog up to {impact.max_backlog})"
        parts.append(f"queue grew by {impact.queue_growth}{backlog}")
    if impact.missed_runs:
        parts.append(f"{impact.missed_runs} run(s) missed")
    return " · ".join(parts) or None


def measures(incident: Incident) -> Measures:
    """The root holder's hold and idle time and its waiters, from the
    evidence of the incident's findings (the longest any of them saw)."""
    hold: float | None = None
    idle: float | None = None
    query: str | None = None
    for finding in incident.findings:
        for holder in finding.evidence.named_holders:
            if incident.root.pid is not None and holder.pid != incident.root.pid:
                continue
            query = query or holder.query
            hold = max(hold or 0.0, holder.held_seconds or 0.0) or hold
            if holder.state and holder.state.startswith("idle") and holder.state_seconds:
                idle = max(idle or 0.0, holder.state_seconds)
    return Measures(hold, idle, incident.waiters or None, query)


def more_findings(incident: Incident, shown: int) -> int:
    """How many of the incident's findings are not among the first ``shown``."""
    return max(incident.finding_count, len(incident.findings)) - min(shown, len(incident.findings))


def incident_lines(incident: Incident) -> list[Said]:
    """Everything below the title but its findings (each surface lists the first
    SHOWN_FINDINGS its own way): the root, its numbers, its impact and, while it
    is open, the next step with its SQL and what running it costs. Once resolved,
    the numbers are those of its worst moment."""
    said = [Said("root", root_text(incident.root))]
    facts = measures(incident)
    numbers = [
        f"held {format_duration(facts.hold_seconds)}" if facts.hold_seconds else "",
        f"idle {format_duration(facts.idle_seconds)}" if facts.idle_seconds else "",
        f"{facts.waiters} waiting now" if facts.waiters and incident.open else "",
    ]
    if any(numbers):
        said.append(
            Said("now" if incident.open else "at worst", " · ".join(n for n in numbers if n))
        )
    if facts.query:
        said.append(Said("last query", facts.query, code=True))
    if incident.locks:
        more = max(incident.impact.locks_held - len(incident.locks), 0)
        said.append(
            Said("locks", ", ".join(incident.locks) + (f" and {more} more" if more else ""))
        )
    impact = impact_text(incident.impact)
    if impact:
        said.append(Said("impact", impact))
    if not incident.open:
        return said
    step = incident.next_step
    said.append(Said("next step", step.action))
    if step.sql:
        said.append(Said("sql", step.sql, code=True))
    if step.cost:
        said.append(Said("cost", step.cost))
    return said

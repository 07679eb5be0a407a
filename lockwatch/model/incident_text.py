"""An incident's words, in one place: its leading kind, the alert and runbook
that kind names, its title (open, then resolved in the past tense), its root
and holder, what its alert is about, the lines below its title and its log
line (``model/next_step.py`` words what to do, from the same leading kind).
The incident book words each incident with these; the status page, the
notifications, the log and the alerts read them here, so none can disagree.
Values from database clients are made one line and bounded here, and escaped
by each surface for its own format."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from lockwatch.model.evidence import (
    LockEvidence,
    OverflowEvidence,
    QueueStallEvidence,
    TargetDownEvidence,
)
from lockwatch.model.findings import Finding, FindingKind
from lockwatch.model.fingerprints import holder_fingerprint
from lockwatch.model.incidents import (
    HOLDING,
    SEVERITY_RANK,
    Impact,
    Incident,
    IncidentRoot,
    Measures,
    Naming,
    Resolution,
    RootKind,
    RootLoad,
    holder_measures,
)
from lockwatch.text import cause_first, client_address, format_duration, one_line, printable

SHOWN_FINDINGS = 5  # findings listed per incident; the API has them all
LABEL_LIMIT = 80  # characters of a label value from a database client
TITLE_LIMIT = 300  # characters of a finding's summary in a title: never the cause cut
# lockwatch's own runbooks, relative: the daemon gives the book its absolute
# base instead (``Settings.runbooks``), from its external URL.
RUNBOOKS_PATH = "/runbooks"

# The labels an open incident's alert carries, the same in lockwatch_incident_active
# and in the webhook payload of lockwatch's own notifications. ``kind`` is the
# leading kind (it names the alert); ``job_name``, as Prometheus owns ``job``;
# ``lock``, ``database``, ``queue``, ``application`` and ``holder`` as it opened.
ROOT_LABELS = (
    *("incident", "fingerprint", "root", "kind", "severity", "database", "lock", "queue"),
    *("job_name", "source", "pid", "application", "holder", "blocking_query"),
)

# What a resolved incident of a root that holds nothing was, by its leading kind.
PAST = {
    FindingKind.LOCK_HELD_TOO_LONG: "was held past its budget",
    FindingKind.LOCK_CONVOY: "had sessions queued on it",
    FindingKind.LOCK_ORPHANED: "was held by an idle session",
    FindingKind.LOCK_POOLED_SESSION: "was held on a transaction-pooled backend",
    FindingKind.LOCK_UNEXPECTED_HOLDER: "was held by a session that should not hold it",
    FindingKind.LOCK_MIGRATION_RUNNING: "was held by a migration past its budget",
    FindingKind.LOCK_QUEUE: "had a strong lock and the queries behind it waiting on it",
    FindingKind.ROW_LOCK_CONVOY: "had sessions waiting on a row it held",
    FindingKind.IDLE_IN_TRANSACTION_BLOCKER: "sat idle in transaction while others waited on it",
    FindingKind.LEADER_LOCK_MISSING: "had no holder",
    FindingKind.LEADER_LOCK_CHURN: "kept changing hands",
    FindingKind.QUEUE_GROWING: "kept growing",
    FindingKind.QUEUE_STALLED: "was stalled",
    FindingKind.JOB_STUCK_RUNNING: "had jobs marked running whose worker was gone",
    FindingKind.JOB_RESCUED_WHILE_RUNNING: "started a rescued job again while its first "
    "worker lived",
    FindingKind.QUEUE_NO_CONSUMER: "had work waiting and no consumer",
    FindingKind.QUEUE_JOB_TOO_LONG: "had a job running far past its task's history",
    FindingKind.QUEUE_CAPACITY_LOST: "completed far less than its normal while work waited",
    FindingKind.JOB_DUPLICATE_START: "started more than once for one run",
    FindingKind.JOB_OVERLAP: "had two runs going at once",
    FindingKind.JOB_MISSED: "missed a scheduled run",
    FindingKind.JOB_TOO_LONG: "ran longer than allowed",
    FindingKind.JOB_FAILED: "failed",
    FindingKind.TARGET_DOWN: "could not be sampled",
    FindingKind.TARGET_TRANSACTION_POOLED: "was read through a transaction pooler",
    FindingKind.TARGET_PRIVILEGES_MISSING: "was read by a role without pg_monitor",
}
ENDED = {
    Resolution.RELEASED: "it let go",
    Resolution.SESSION_ENDED: "its session ended",
    Resolution.TARGET_BACK: "it answered again",
    Resolution.CLEARED: "it cleared",
    Resolution.UNWATCHED: "its target is no longer watched",
}
_KIND_RANK = {kind: rank for rank, kind in enumerate(FindingKind)}


# -- the leading kind, its alert and its runbook ----------------------------------


def _rank(finding: Finding) -> tuple[int, int]:
    return SEVERITY_RANK[finding.severity], _KIND_RANK[finding.kind]


def leading(findings: Sequence[Finding]) -> Finding:
    """The finding that leads: the most severe, then the kind declared first."""
    return min(findings, key=_rank)


def opening_kinds(findings: Sequence[Finding]) -> tuple[FindingKind, ...]:
    """The kinds of the findings an incident opens with, the leading one first
    (it names the incident for as long as it is open), then the others by rank."""
    return tuple(dict.fromkeys(f.kind for f in sorted(findings, key=_rank)))


def lead_kind(incident: Incident) -> FindingKind:
    """The kind that opened the incident: it names its title, alert and runbook
    for as long as it is open, whatever joins later."""
    return incident.kinds[0] if incident.kinds else leading(incident.findings).kind


def lead_finding(findings: Sequence[Finding], lead: FindingKind) -> Finding:
    """A finding of the leading kind (it may have ended: then the one leading now)."""
    return next((f for f in findings if f.kind is lead), None) or leading(findings)


# A few kinds and runbook bases, named in every open incident's words each poll.
@functools.lru_cache(maxsize=1024)
def alert_name(kind: str) -> str:
    """The alert an incident led by a finding kind raises, the same name in the
    bundled Prometheus rules, lockwatch's own notifications and the runbooks.

    >>> alert_name("lock_held_too_long")
    'LockwatchLockHeldTooLong'
    """
    return "Lockwatch" + "".join(part.capitalize() for part in kind.split("_"))


@functools.lru_cache(maxsize=1024)
def runbook_link(base: str, kind: str) -> str:
    """The runbook section of ``kind``: its alert's name, lower-cased, as the
    anchor (the one every link to the runbooks is made by).

    >>> runbook_link("https://lockwatch.example/runbooks", "lock_convoy")
    'https://lockwatch.example/runbooks#lockwatchlockconvoy'
    """
    return f"{base}#{alert_name(kind).lower()}"


# -- the root and its holder -------------------------------------------------------


def holder_text(root: IncidentRoot) -> str:
    """The root holder in a title: its pid and application, or its gid.
    >>> holder_text(IncidentRoot(RootKind.SESSION, "m", pid=7, client_unknown=True))
    'backend 7, client unknown'"""
    if root.kind is RootKind.PREPARED:
        return f"prepared transaction {one_line(root.gid)}"
    if root.client_unknown:
        return f"backend {root.pid}, client unknown"
    name = f" {one_line(root.application_name)}" if root.application_name else ""
    return f"pid {root.pid}{name}"


def root_text(root: IncidentRoot) -> str:
    """The root as people know it.

    >>> root_text(IncidentRoot(RootKind.SESSION, "main", pid=7023, application_name="worker-4"))
    'pid 7023 · worker-4 · local socket'
    >>> root_text(IncidentRoot(RootKind.QUEUE, "main", queue="webhooks"))
    'queue webhooks on main'
    """
    if root.kind in (RootKind.SESSION, RootKind.POOLED_BACKEND) and root.pid is not None:
        where = client_address(root.client_addr, root.client_port, root.client_hostname)
        names = (
            ("client unknown",) if root.client_unknown else (root.application_name or "-", where)
        )
        return " · ".join((f"pid {root.pid}", *(one_line(n, LABEL_LIMIT) for n in names)))
    if root.kind is RootKind.PREPARED:
        return f"prepared transaction {one_line(root.gid or '-', LABEL_LIMIT)}"
    for word, value in (("queue", root.queue), ("job", root.job), ("lock", root.lock)):
        if value:
            return f"{word} {value} on {root.target}"
    return f"target {root.target}" + (f" ({root.source})" if root.source else "")


# -- what it is about ------------------------------------------------------------------


def _lock_label(evidence: LockEvidence) -> str:
    key = one_line(evidence.key)
    return f"{one_line(evidence.name)} ({key})" if evidence.name else key


def held_locks(findings: Sequence[Finding]) -> list[tuple[str, str]]:
    """(database, lock) of the locks the findings blame a holder for, in their
    order, each once: keys by their configured or catalogued name."""
    return list(dict.fromkeys(_each_held(findings)))


def _each_held(findings: Iterable[Finding]) -> Iterator[tuple[str, str]]:
    """``held_locks`` one at a time, again when met again: a title that names
    only the first is not made to word them all."""
    for finding in findings:
        evidence = finding.evidence
        if isinstance(evidence, LockEvidence) and evidence.holder_pid is not None:
            yield (one_line(evidence.database or ""), _lock_label(evidence))
            for listed in evidence.first_keys:  # a holder's first keys (unnamed)
                database, _, key = listed.partition("/")
                yield (one_line(database), one_line(key))
        elif isinstance(evidence, QueueStallEvidence) and evidence.lock is not None:
            chain = evidence.lock
            named = chain.lock != chain.key
            label = f"{one_line(chain.lock)} ({one_line(chain.key)})" if named else chain.key
            yield (one_line(chain.database), one_line(label))
        elif isinstance(evidence, OverflowEvidence):
            for lock in evidence.locks:
                database, _, key = lock.partition("/")
                yield (one_line(database), one_line(key))


def naming(
    root: IncidentRoot, findings: Sequence[Finding], lead: FindingKind, query: str | None = None
) -> Naming:
    """What an incident opening with ``findings`` names for as long as it is
    open: its holder, the lock of its leading finding (or the first it holds),
    the holder's query fingerprint (``query``: its blocking episode's)."""
    about = held_locks([lead_finding(findings, lead), *findings])
    database, lock = about[0] if about else (root.database or "", root.lock or "")
    holding = root.kind in HOLDING
    stalled = next((f.subject.queue for f in findings if f.subject.queue), None) or ""
    return Naming(
        holder=root_text(root) if holding else "",
        application=one_line(root.application_name or "", LABEL_LIMIT) if holding else "",
        database=database,
        lock=lock,
        queue=one_line(stalled, LABEL_LIMIT) if holding else "",
        blocking_query=(query or holder_fingerprint(findings)) if holding else "",
    )


def identity_labels(root: IncidentRoot) -> dict[str, str]:
    """The parts that name the root (``IncidentRoot.identity``) as labels, ""
    where unused: what every replica gives the same root."""
    values = {
        "database": root.database or "",
        "lock": root.lock or "",
        "queue": root.queue or "",
        "job_name": root.job or "",
        "source": root.source or "",
        "pid": "" if root.pid is None else str(root.pid),
    }
    return {name: printable(one_line(value, LABEL_LIMIT)) for name, value in values.items()}


def root_labels(incident: Incident) -> dict[str, str]:
    """The incident's labels by ROOT_LABELS, "" where unused; the lock, database,
    application and holder as it opened (an alert's labels must not move while
    it fires), values from database clients on one bounded, encodable line."""
    root, named = incident.root, incident.naming
    values = {
        **identity_labels(root),
        "incident": incident.id,
        "fingerprint": incident.fingerprint,
        "root": root.kind.value,
        "kind": lead_kind(incident).value,
        "severity": incident.severity.value,
        "database": named.database or root.database or "",
        "lock": named.lock or root.lock or "",
        "queue": named.queue or root.queue or "",
        "application": named.application or root.application_name or "",
        "holder": named.holder,
        "blocking_query": named.blocking_query,
    }
    return {name: printable(one_line(values[name], LABEL_LIMIT)) for name in ROOT_LABELS}


# -- titles ----------------------------------------------------------------------------


def _holds_text(findings: Sequence[Finding], load: RootLoad | None) -> str:
    ranked = sorted(findings, key=_rank)
    if load is None:  # the locks the findings name are all it is known to hold
        labels = [lock for _, lock in held_locks(ranked)]
        count, first = len(labels), next(iter(labels), None)
    else:
        count, first = load.locks_held, next((lock for _, lock in _each_held(ranked)), None)
    if first is None:
        return f"holds {count} advisory locks" if count else "holds advisory locks"
    return f"holds {count} locks ({first}, …)" if count > 1 else f"holds {first}"


def _holder_title(
    root: IncidentRoot,
    findings: Sequence[Finding],
    load: RootLoad | None,
    waiters: int,
    facts: Measures,
) -> str:
    parts = [f"{holder_text(root)} {_holds_text(findings, load)}"]
    if facts.idle_state is not None and facts.idle_seconds is not None:
        parts.append(f"{one_line(facts.idle_state)} {format_duration(facts.idle_seconds)}")
    if waiters:
        parts.append(f"{waiters} waiting")
    kinds = {f.kind for f in findings}
    if FindingKind.LOCK_POOLED_SESSION in kinds:
        parts.append("on a transaction-pooled backend")
    if FindingKind.LOCK_UNEXPECTED_HOLDER in kinds:
        parts.append("not an allowed holder")
    parts.extend(
        f"queue {one_line(f.subject.queue)} stalled"
        for f in findings
        if f.kind is FindingKind.QUEUE_STALLED
    )
    return ", ".join(parts)


def root_words(root: IncidentRoot) -> str:
    """What a title calls a root that holds nothing: ``queue webhooks``."""
    for word, value in (("queue", root.queue), ("job", root.job), ("lock", root.lock)):
        if value:
            return f"{word} {one_line(value)}"
    source = f" source {one_line(root.source)}" if root.source else ""
    return f"target {one_line(root.target)}{source}"


def incident_title(
    root: IncidentRoot,
    findings: Sequence[Finding],
    load: RootLoad | None,
    waiters: int,
    lead: FindingKind,
    measures: Measures | None = None,
) -> str:
    """One line naming the root first, then what matters most about it: for a
    holder what it holds and who waits, else its leading finding's summary
    (which names the root already, so it is not said twice), a target's error
    with its cause first. Nothing a person needs is cut. ``measures``: the
    root holder's in ``findings``, when the caller has them already."""
    if root.kind in HOLDING:
        facts = holder_measures(root, findings) if measures is None else measures
        return _holder_title(root, findings, load, waiters, facts)
    finding = lead_finding(findings, lead)
    evidence = finding.evidence
    if isinstance(evidence, TargetDownEvidence):
        cause, where = cause_first(evidence.error, 10 * TITLE_LIMIT)
        at = f" ({one_line(where, TITLE_LIMIT)})" if where else ""
        return f"{root_words(root)} down: {one_line(cause, TITLE_LIMIT)}{at}"
    summary = one_line(finding.summary, TITLE_LIMIT)
    words = root_words(root)
    return summary if words in summary else f"{words}: {summary}"


def _lasted(incident: Incident) -> str:
    end = incident.resolved_at or incident.updated_at
    return format_duration(max(0.0, (end - incident.opened_at).total_seconds()))


def resolved_title(incident: Incident) -> str:
    """What the incident was and how it ended, in the past tense, for its
    resolution and its card once resolved."""
    root, impact, named = incident.root, incident.impact, incident.naming
    ended = ENDED.get(incident.resolution or Resolution.CLEARED, "it cleared")
    if root.kind in HOLDING:
        lock = named.lock or (incident.locks[0] if incident.locks else "")
        held = lock or "advisory locks"
        if impact.locks_held > 1:
            held = f"{impact.locks_held} locks" + (f" ({lock}, …)" if lock else "")
        waited = f", at most {impact.max_waiters} waiting" if impact.max_waiters else ""
        return f"{holder_text(root)} held {held}{waited}; {ended} after {_lasted(incident)}"
    lead = lead_kind(incident)
    said = f"{root_words(root)} {PAST[lead]}"
    errors = [f.evidence for f in incident.findings if isinstance(f.evidence, TargetDownEvidence)]
    if errors:
        said += f" ({one_line(cause_first(errors[0].error, 10 * TITLE_LIMIT)[0], TITLE_LIMIT)})"
    if impact.max_backlog:
        said += f" (backlog up to {impact.max_backlog})"
    return f"{said}; {ended} after {_lasted(incident)}"


# -- the lines below the title -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Said:
    """One line of an incident for people: a label, its text, and whether the
    text is code (SQL) to be shown verbatim."""

    label: str
    text: str
    code: bool = False


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


def more_findings(incident: Incident, shown: int) -> int:
    """How many of the incident's findings are not among the first ``shown``."""
    return max(incident.finding_count, len(incident.findings)) - min(shown, len(incident.findings))


def incident_lines(incident: Incident) -> list[Said]:
    """Everything below the title but its findings (each surface lists the first
    SHOWN_FINDINGS its own way): the root, its numbers, its impact and, while it
    is open, the next step with its SQL and what running it costs. Once resolved,
    the numbers are those of its worst moment."""
    said = [Said("root", root_text(incident.root))]
    facts = holder_measures(incident.root, incident.findings)
    numbers = [
        f"held {format_duration(facts.hold_seconds)}" if facts.hold_seconds else "",
        f"idle {format_duration(facts.idle_seconds)}" if facts.idle_seconds else "",
        f"{incident.waiters} waiting now" if incident.waiters and incident.open else "",
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


# -- the log -----------------------------------------------------------------------------


def log_event(incident: Incident, moment: str) -> tuple[str, dict[str, str]]:
    """An incident's log event at ``moment`` (opened, worse, resolved): one
    line with its id, title, next step (while open) and runbook, and the same
    facts as fields for the logfmt and json formats."""
    step = incident.next_step
    fields = {
        "incident": incident.id,
        "target": incident.target,
        "kind": lead_kind(incident).value,
        "severity": incident.severity.value,
    }
    said = [f"incident {incident.id} {moment} [{incident.severity.value}] {incident.target}: "]
    said.append(one_line(incident.title, 2 * TITLE_LIMIT))
    if incident.open:
        fields["next_step"] = step.action
        said.append(f"; next step: {step.action}")
        if step.sql:
            fields["sql"] = step.sql
            said.append(f" ({step.sql})")
    else:
        impact = impact_text(incident.impact)
        if impact:
            fields["impact"] = impact
            said.append(f"; {impact}")
    fields["runbook"] = step.runbook
    said.append(f"; runbook: {step.runbook}")
    return "".join(said), fields

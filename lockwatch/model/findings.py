"""Findings: one problem, now, with what it is about and how bad it is."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from lockwatch.model.evidence import (
    CapacityEvidence,
    ChurnEvidence,
    DuplicateStartEvidence,
    Evidence,
    FailedRunEvidence,
    LockEvidence,
    LockWaitEvidence,
    LongJobsEvidence,
    LongRunEvidence,
    MissedRunEvidence,
    NoConsumerEvidence,
    OverflowEvidence,
    OverlapEvidence,
    PooledLockEvidence,
    PrivilegesMissingEvidence,
    QueueEvidence,
    QueueStallEvidence,
    RescuedRunsEvidence,
    SourceDownEvidence,
    StuckJobsEvidence,
    TargetDownEvidence,
    TransactionPooledEvidence,
)
from lockwatch.model.evidence.json_form import (
    JsonObject,
    JsonShapeError,
    from_json,
    object_json,
    to_json,
)
from lockwatch.model.finding_kinds import Family, FindingKind, Severity

# The kinds are re-exported: the rest of lockwatch finds them with the findings.
__all__ = [
    "EVIDENCE_FAMILIES",
    "MORE_HOLDERS_SUBJECT",
    "Family",
    "Finding",
    "FindingKind",
    "Related",
    "Severity",
    "Subject",
    "evidence_json",
    "finding_json",
    "load_finding",
    "read_evidence",
    "subject_label",
]


@dataclass(frozen=True, slots=True)
class Subject:
    """What a finding is about. Unused parts stay None."""

    database: str | None = None
    lock: str | None = None  # configured name, or the key as the application wrote it
    queue: str | None = None  # configured queue name
    job: str | None = None  # configured job name
    # A target's own source (``queue/webhooks``), for a target_down that is
    # about that source alone.
    source: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        """Every part, None where unused: one shape for every kind.

        >>> Subject(queue="webhooks").as_dict()
        {'database': None, 'lock': None, 'queue': 'webhooks', 'job': None, 'source': None}
        """
        return {part.name: getattr(self, part.name) for part in fields(self)}

    def render(self) -> str:
        parts = [p for p in (self.database, self.lock, self.queue, self.job, self.source) if p]
        return "/".join(parts) if parts else "-"


# The lock of the finding, per kind, that counts the holders past the number
# told one by one (detect/lock_holders.py): no key, and no holder named.
MORE_HOLDERS_SUBJECT = "(more sessions)"


def subject_label(part: str) -> str:
    """The Prometheus label of a subject part. Prometheus owns ``job`` (the
    scrape job), so a subject's job is ``job_name``.

    >>> subject_label("job"), subject_label("queue")
    ('job_name', 'queue')
    """
    return "job_name" if part == "job" else part


@dataclass(frozen=True, slots=True)
class Related:
    """Another finding with the same cause, named by its identity."""

    kind: FindingKind
    target: str
    subject: Subject


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem, now: what it is about, how bad, since when, the facts
    behind it, and the other findings with the same cause."""

    kind: FindingKind
    target: str
    subject: Subject
    severity: Severity
    since: datetime
    summary: str
    evidence: Evidence
    related: tuple[Related, ...] = ()

    @property
    def identity(self) -> tuple[str, str, Subject]:
        """Findings with the same identity are the same ongoing problem."""
        return (self.kind.value, self.target, self.subject)


_LOCK_FAMILIES = (LockEvidence, OverflowEvidence)

# The evidence families each kind carries. A lock kind past the per-kind cap
# carries the overflow's; a target_down about one source, the source's.
EVIDENCE_FAMILIES: Mapping[FindingKind, tuple[type[Evidence], ...]] = {
    FindingKind.LOCK_HELD_TOO_LONG: _LOCK_FAMILIES,
    FindingKind.LOCK_CONVOY: _LOCK_FAMILIES,
    FindingKind.LOCK_ORPHANED: _LOCK_FAMILIES,
    FindingKind.LOCK_POOLED_SESSION: (PooledLockEvidence, OverflowEvidence),
    FindingKind.LOCK_UNEXPECTED_HOLDER: _LOCK_FAMILIES,
    FindingKind.LEADER_LOCK_MISSING: _LOCK_FAMILIES,
    FindingKind.LEADER_LOCK_CHURN: (ChurnEvidence, OverflowEvidence),
    FindingKind.LOCK_MIGRATION_RUNNING: _LOCK_FAMILIES,
    FindingKind.LOCK_QUEUE: (LockWaitEvidence,),
    FindingKind.ROW_LOCK_CONVOY: (LockWaitEvidence,),
    FindingKind.IDLE_IN_TRANSACTION_BLOCKER: (LockWaitEvidence,),
    FindingKind.QUEUE_GROWING: (QueueEvidence,),
    FindingKind.QUEUE_STALLED: (QueueStallEvidence,),
    FindingKind.JOB_STUCK_RUNNING: (StuckJobsEvidence,),
    FindingKind.JOB_RESCUED_WHILE_RUNNING: (RescuedRunsEvidence,),
    FindingKind.QUEUE_NO_CONSUMER: (NoConsumerEvidence,),
    FindingKind.QUEUE_JOB_TOO_LONG: (LongJobsEvidence,),
    FindingKind.QUEUE_CAPACITY_LOST: (CapacityEvidence,),
    FindingKind.JOB_DUPLICATE_START: (DuplicateStartEvidence,),
    FindingKind.JOB_OVERLAP: (OverlapEvidence,),
    FindingKind.JOB_MISSED: (MissedRunEvidence,),
    FindingKind.JOB_TOO_LONG: (LongRunEvidence,),
    FindingKind.JOB_FAILED: (FailedRunEvidence,),
    FindingKind.TARGET_DOWN: (TargetDownEvidence, SourceDownEvidence),
    FindingKind.TARGET_TRANSACTION_POOLED: (TransactionPooledEvidence,),
    FindingKind.TARGET_PRIVILEGES_MISSING: (PrivilegesMissingEvidence,),
}


def evidence_json(finding: Finding) -> JsonObject:
    """A finding's evidence as JSON-ready values, its related findings under
    ``related``: the ``evidence`` of the API, the state file and the outbox."""
    return {**object_json(finding.evidence), "related": to_json(finding.related)}


def finding_json(finding: Finding) -> JsonObject:
    """A finding as JSON-ready values, ``since`` to the microsecond."""
    return {
        "kind": finding.kind.value,
        "target": finding.target,
        "subject": object_json(finding.subject),
        "severity": finding.severity.value,
        "since": finding.since.isoformat(),
        "summary": finding.summary,
        "evidence": evidence_json(finding),
    }


def load_finding(entry: Any) -> Finding | None:
    """The finding ``finding_json`` made, or None when ``entry`` is not one.

    Evidence of an older shape is read as far as it goes: related findings
    that cannot be read (an older file names them by kind alone) are left
    out, and a finding whose evidence cannot be read is dropped, to fire
    again if it is still true."""
    try:
        since = datetime.fromisoformat(entry["since"])
        if since.tzinfo is None:
            # cannot be ordered against the findings the detectors make
            return None
        kind = FindingKind(entry["kind"])
        facts = dict(entry["evidence"])
        links = facts.pop("related", [])
        return Finding(
            kind=kind,
            target=str(entry["target"]),
            subject=from_json(Subject, entry["subject"]),
            severity=Severity(entry["severity"]),
            since=since,
            summary=str(entry["summary"]),
            evidence=read_evidence(kind, facts),
            related=_related(links),
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def read_evidence(kind: FindingKind, facts: object) -> Evidence:
    """The evidence ``kind`` carries, from its JSON; JsonShapeError when it is none of it."""
    for family in EVIDENCE_FAMILIES[kind]:
        try:
            return from_json(family, facts)
        except JsonShapeError:
            continue
    raise JsonShapeError(f"the evidence is of no family {kind.value} carries")


def _related(links: object) -> tuple[Related, ...]:
    readable = []
    for link in links if isinstance(links, list) else ():
        with contextlib.suppress(JsonShapeError):
            readable.append(from_json(Related, link))
    return tuple(readable)

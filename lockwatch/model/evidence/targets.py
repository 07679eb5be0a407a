"""The evidence of findings about a target itself: ``target_down`` (a target, or
one of its sources, that cannot be sampled), ``target_transaction_pooled`` and
``target_privileges_missing``."""

from __future__ import annotations

from dataclasses import dataclass

from lockwatch.model.evidence.sessions import FindingFacts


@dataclass(frozen=True, slots=True)
class SourceBlocker:
    """A session holding a lock on a relation a source's query reads, in a
    mode that blocks the read, when the query timed out."""

    pid: int
    mode: str
    relation: str  # schema.name
    application_name: str | None = None


@dataclass(frozen=True, slots=True)
class TargetDownEvidence(FindingFacts):
    error: str  # the whole (secret-free) text
    down_seconds: float


@dataclass(frozen=True, slots=True)
class SourceDownEvidence(FindingFacts):
    source: str
    error: str
    down_seconds: float
    errors_total: int
    # Who held what the source's query waited on when it timed out: the
    # source is down because of them, and joins their incident.
    blocked_by: tuple[SourceBlocker, ...] = ()


@dataclass(frozen=True, slots=True)
class TransactionPooledEvidence(FindingFacts):
    """lockwatch's own session goes through a transaction pooler."""

    dsn: str  # where, without secrets
    evidence: str  # what showed the pooling
    meanwhile: tuple[str, ...]  # what lockwatch does without while it reads this way


@dataclass(frozen=True, slots=True)
class PrivilegesMissingEvidence(FindingFacts):
    """lockwatch's role lacks pg_monitor: other roles' sessions are hidden from it."""

    role: str
    grant: str  # the statement that gives the role what it needs
    meanwhile: tuple[str, ...]  # what lockwatch cannot judge while it reads this way

"""The detectors that look at sampling itself: a target that cannot be read, and
one whose DSN goes through a transaction pooler."""

from __future__ import annotations

from datetime import datetime

from lockwatch.model.evidence import TargetDownEvidence, TransactionPooledEvidence
from lockwatch.model.findings import Finding, FindingKind, Severity, Subject
from lockwatch.model.pooler import POOLED_SESSION_LOSSES, SessionPooling
from lockwatch.model.views import TargetStatus
from lockwatch.text import one_line

# Driver errors can be long and span lines; the summary keeps their gist, the
# evidence keeps the whole (already secret-free) text.
ERROR_SUMMARY_LIMIT = 200


def detect_target_down(status: TargetStatus, now: datetime) -> list[Finding]:
    """A ``target_down`` finding when the last poll of the target failed."""
    if status.up:
        return []
    since = status.failing_since or status.checked_at
    error = status.error or "no snapshot"
    return [
        Finding(
            FindingKind.TARGET_DOWN,
            status.target,
            Subject(),
            Severity.CRITICAL,
            since,
            f"target {one_line(status.target)} cannot be sampled: "
            f"{one_line(error, ERROR_SUMMARY_LIMIT)}",
            TargetDownEvidence(
                error=error, down_seconds=round(max(0.0, (now - since).total_seconds()), 1)
            ),
        )
    ]


def detect_transaction_pooled(target: str, pooling: SessionPooling | None) -> list[Finding]:
    """A ``target_transaction_pooled`` while lockwatch's own session to the
    target goes through a pooler that hands out server connections per
    transaction (seen once, when the session was first opened)."""
    if pooling is None:
        return []
    return [
        Finding(
            FindingKind.TARGET_TRANSACTION_POOLED,
            target,
            Subject(),
            Severity.WARNING,
            pooling.since,
            f"lockwatch reads {one_line(target)} through a transaction pooler: pg_locks read "
            "this way is right, but give lockwatch a direct DSN so that its session stays "
            "one backend",
            TransactionPooledEvidence(
                dsn=pooling.where, evidence=pooling.evidence, meanwhile=POOLED_SESSION_LOSSES
            ),
        )
    ]

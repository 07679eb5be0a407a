"""The detectors that look at sampling itself: a target that cannot be read, one
whose DSN goes through a transaction pooler, and one read by a role that cannot
see other roles' sessions."""

from __future__ import annotations

from datetime import datetime

from lockwatch.model.evidence import (
    PrivilegesMissingEvidence,
    TargetDownEvidence,
    TransactionPooledEvidence,
)
from lockwatch.model.findings import Finding, FindingKind, Severity, Subject
from lockwatch.model.locks import HIDDEN_SESSION_LOSSES, SessionVisibility
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


def detect_privileges_missing(
    target: str, visibility: SessionVisibility | None, now: datetime
) -> list[Finding]:
    """A ``target_privileges_missing`` while lockwatch's role cannot see other
    roles' sessions (read when its session was opened): every fact about them
    but who they are is hidden, and the detectors do not judge hidden facts."""
    if visibility is None or visibility.sees_all_sessions:
        return []
    role = one_line(visibility.role)
    grant = f"GRANT pg_monitor TO {_identifier(visibility.role)}"
    return [
        Finding(
            FindingKind.TARGET_PRIVILEGES_MISSING,
            target,
            Subject(),
            Severity.WARNING,
            now,
            f"lockwatch's role {role} on {one_line(target)} lacks pg_monitor: other roles' "
            "sessions are hidden from it, so holders are not judged by their state or "
            f"address; {one_line(grant)}",
            PrivilegesMissingEvidence(
                role=visibility.role,
                grant=grant,
                meanwhile=HIDDEN_SESSION_LOSSES,
            ),
        )
    ]


def _identifier(name: str) -> str:
    """A role name as SQL writes it.

    >>> print(_identifier("lockwatch"), _identifier("Monitor"))
    lockwatch "Monitor"
    """
    if name.isidentifier() and name == name.lower() and name.isascii():
        return name
    return '"' + name.replace('"', '""') + '"'

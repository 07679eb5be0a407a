"""The one detector that looks at sampling itself: a target that cannot be read."""

from __future__ import annotations

from datetime import datetime

from lockwatch.model.evidence import TargetDownEvidence
from lockwatch.model.findings import Finding, FindingKind, Severity, Subject
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

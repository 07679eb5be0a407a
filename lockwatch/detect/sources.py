"""A target's own sources that cannot be sampled."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from lockwatch.detect.targets import ERROR_SUMMARY_LIMIT
from lockwatch.model.evidence import SourceDownEvidence
from lockwatch.model.findings import Finding, FindingKind, Severity, Subject
from lockwatch.model.views import SourceHealth
from lockwatch.text import one_line


def detect_source_down(target: str, health: Sequence[SourceHealth], now: datetime) -> list[Finding]:
    """A ``target_down`` finding per source failing on its own (not because the
    target is down); its subject names the source in ``Subject.source``. A
    source whose query timed out behind a session's lock says whose: that
    session is the root of its incident, not the source."""
    findings = []
    for source in health:
        if source.failing_since is None:
            continue
        error = source.error or "no reading"
        findings.append(
            Finding(
                FindingKind.TARGET_DOWN,
                target,
                Subject(source=source.name),
                Severity.CRITICAL,
                source.failing_since,
                f"{one_line(source.name)} of target {one_line(target)} cannot be sampled: "
                f"{one_line(error, ERROR_SUMMARY_LIMIT)}{_blocked_text(source)}",
                SourceDownEvidence(
                    source=source.name,
                    error=error,
                    down_seconds=round(max(0.0, (now - source.failing_since).total_seconds()), 1),
                    errors_total=source.errors_total,
                    blocked_by=source.blocked_by,
                ),
            )
        )
    return findings


def _blocked_text(source: SourceHealth) -> str:
    """``; blocked by pid 42 (deploy) holding AccessExclusiveLock on pgboss.archive``"""
    if not source.blocked_by:
        return ""
    first = source.blocked_by[0]
    name = f" ({one_line(first.application_name)})" if first.application_name else ""
    more = len(source.blocked_by) - 1
    return (
        f"; blocked by pid {first.pid}{name} holding {first.mode} on {one_line(first.relation)}"
        + (f" and {more} more" if more else "")
    )

"""Jobs a queue library marks running whose worker session is gone
(``job_stuck_running``), from the latest reading of each queue.

The library's own rescue (pg-boss's expiry after 15 minutes, graphile-worker's
4-hour lock) comes late or never; meanwhile the job is neither done nor
retried. Pure: the readings come in, findings go out.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from lockwatch.detect.queues import QueueInput
from lockwatch.model.evidence import StuckJobsEvidence
from lockwatch.model.findings import Finding, FindingKind, Severity, Subject
from lockwatch.text import format_duration, one_line

SHOWN_IDS = 5  # job ids in the summary; the evidence has all the source gave


def _stuck_summary(queue: str, evidence: StuckJobsEvidence, now: datetime) -> str:
    ids = ", ".join(one_line(i) for i in evidence.job_ids[:SHOWN_IDS])
    more = evidence.stuck_count - min(len(evidence.job_ids), SHOWN_IDS)
    listed = (
        f" ({ids}{f' and {more} more' if more > 0 else ''})"
        if ids
        else " (counted, not named: which of its running jobs they are cannot be told"
        " from what its library records)"
    )
    age = ""
    if evidence.since is not None:
        age = f", the oldest taken {format_duration((now - evidence.since).total_seconds())} ago"
    return (
        f"queue {one_line(queue)}: {evidence.stuck_count} job(s) marked running whose "
        f"worker session is gone{listed}{age}"
    )


def detect_stuck_running(target: str, queues: Sequence[QueueInput], now: datetime) -> list[Finding]:
    """One finding per queue whose latest reading has stuck running jobs."""
    findings = []
    for queue in queues:
        latest = queue.samples[-1] if queue.samples else None
        if latest is None or latest.stuck is None or latest.stuck.count == 0:
            continue
        stuck = latest.stuck
        evidence = StuckJobsEvidence(
            queue=queue.name,
            stuck_count=stuck.count,
            job_ids=stuck.job_ids,
            since=stuck.since,
            depth=latest.depth,
        )
        findings.append(
            Finding(
                FindingKind.JOB_STUCK_RUNNING,
                target,
                Subject(queue=queue.name),
                Severity.WARNING,
                stuck.since or latest.at,
                _stuck_summary(queue.name, evidence, now),
                evidence,
            )
        )
    return findings

"""``queue_no_consumer``: work waits and no consumer of the queue is alive, for
longer than the queue's ``no_consumer_after``.

Not a stall: a stall has consumers that do nothing; here there is nobody (every
worker gone while a web app still enqueues). What counts as a consumer is what
some source tells: the queue library's own record of its live workers (a
preset's ``consumers`` column: pg-boss instances working the queue, graphile-
worker's listening sessions, procrastinate's workers with a fresh heartbeat),
and each bound worker group's database sessions and processes. The queue is
judged only when at least one source tells, and has no consumer only when
every one that tells says none: never guessed from silence.

Pure: the monitor keeps, per queue, since when it has been unserved
(:func:`unserved_since`, reading after reading) and hands it in with ``now``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from lockwatch.detect.queues import QueueInput, WorkerInput
from lockwatch.model.evidence import ConsumerCount, NoConsumerEvidence
from lockwatch.model.findings import Finding, FindingKind, Severity, Subject
from lockwatch.model.queues import QueueSample
from lockwatch.text import format_duration, one_line

LIBRARY = "library"  # ConsumerCount.source of the queue library's own record


def consumer_counts(
    sample: QueueSample, workers: Sequence[WorkerInput]
) -> tuple[ConsumerCount, ...]:
    """Every source that tells how many consumers the queue has now.

    >>> from datetime import UTC
    >>> consumer_counts(QueueSample(datetime(2026, 1, 1, tzinfo=UTC), 3, consumers=0), ())
    (ConsumerCount(source='library', count=0),)
    """
    counts = [] if sample.consumers is None else [ConsumerCount(LIBRARY, sample.consumers)]
    for worker in workers:
        if worker.sessions is not None:
            counts.append(ConsumerCount(f"{worker.group.name} sessions", len(worker.sessions)))
        processes = worker.cpu[-1].processes if worker.cpu else None
        if processes is not None:
            counts.append(ConsumerCount(f"{worker.group.name} processes", processes))
    return tuple(counts)


def unserved_since(
    before: datetime | None, sample: QueueSample, counts: Sequence[ConsumerCount]
) -> datetime | None:
    """Since when the queue has had work waiting and no consumer, after this
    reading: ``before`` while it goes on, the reading's time when it begins,
    None when work is not waiting, a consumer is alive or no source tells."""
    if sample.depth == 0 or not counts or any(c.count > 0 for c in counts):
        return None
    return before if before is not None else sample.at


def _summary(evidence: NoConsumerEvidence, now: datetime) -> str:
    told = "; ".join(f"{one_line(c.source)}: 0 alive" for c in evidence.consumers)
    oldest = ""
    if evidence.oldest_age_seconds is not None:
        oldest = f", the oldest for {format_duration(evidence.oldest_age_seconds)}"
    return (
        f"queue {one_line(evidence.queue)}: {evidence.depth} waiting{oldest}, and no consumer "
        f"alive for {format_duration((now - evidence.since).total_seconds())} ({told})"
    )


def detect_no_consumer(
    target: str, queue: QueueInput, since: datetime | None, now: datetime
) -> Finding | None:
    """The finding once the queue has been unserved past its budget."""
    budget = queue.thresholds.no_consumer_after
    if since is None or not queue.samples or (now - since).total_seconds() < budget:
        return None
    latest = queue.samples[-1]
    evidence = NoConsumerEvidence(
        queue=queue.name,
        depth=latest.depth,
        oldest_age_seconds=latest.oldest_age_seconds,
        since=since,
        budget_seconds=budget,
        consumers=consumer_counts(latest, queue.workers),
    )
    return Finding(
        FindingKind.QUEUE_NO_CONSUMER,
        target,
        Subject(queue=queue.name),
        Severity.CRITICAL,
        since,
        _summary(evidence, now),
        evidence,
    )

"""Findings for the notifier's tests: the seed 002 convoy as the real detectors
report it, and plain findings of any kind."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from lockwatch.detect.locks import detect_locks
from lockwatch.model.findings import Finding, FindingKind, Severity, Subject
from lockwatch.settings.locks import LockSettings
from tests.factories import DB, NOW, TARGET, backend, held, snapshot, waiting

HOLDER_PID = 1234


def convoy(
    now: datetime = NOW,
    *,
    target: str = TARGET,
    key: int = 42,
    app: str = "webhook-worker-1",
    query: str = "SELECT pg_advisory_lock(42)",
    addr: str | None = "10.0.0.5",
    waiters: int = 5,
) -> list[Finding]:
    """lock_held_too_long and lock_convoy on one lock: held 340 s by an idle
    worker (budget 300 s) with ``waiters`` sessions queued for up to 300 s."""
    queued = [HOLDER_PID + 1 + n for n in range(waiters)]
    return detect_locks(
        snapshot(
            held(key, HOLDER_PID, held_for=340, now=now),
            *(waiting(key, pid, waited_for=300 - n, now=now) for n, pid in enumerate(queued)),
            backends=[
                backend(HOLDER_PID, app, addr=addr, idle_for=330, query=query, now=now),
                *(
                    backend(pid, f"webhook-worker-{n + 2}", waits_on=[HOLDER_PID], now=now)
                    for n, pid in enumerate(queued)
                ),
            ],
            now=now,
            target=target,
        ),
        LockSettings(),
        now,
    )


def finding(
    kind: FindingKind = FindingKind.LOCK_ORPHANED,
    lock: str | None = "7,13",
    *,
    target: str = TARGET,
    severity: Severity = Severity.WARNING,
    lasted: float = 0.0,
    now: datetime = NOW,
    summary: str = "",
    evidence: Mapping[str, Any] | None = None,
    subject: Subject | None = None,
) -> Finding:
    """A finding that began ``lasted`` seconds before ``now``."""
    return Finding(
        kind=kind,
        target=target,
        subject=subject or Subject(DB if lock else None, lock),
        severity=severity,
        since=now - timedelta(seconds=lasted),
        summary=summary or f"{kind.value} on {lock}",
        evidence=dict(evidence or {}),
    )

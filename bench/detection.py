"""Detection time: a seed incident replayed on the benchmark server, a fresh
``lockwatch run`` watching it, and the time from the incident starting to its
finding appearing in ``/api/v1/findings``.

Adding an incident is adding an ``Incident`` to ``INCIDENTS`` (and taking it
off ``NOT_YET``): how to replay it, the target config that watches it, the
findings it must raise, and, when the replay needs a moment to set up
before the incident proper, how to tell that it has begun.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psycopg
from psycopg import sql

from bench.daemon import TARGET, LockwatchProcess, target_config
from bench.server import LOCKWATCH_ROLE, BenchServer
from lockwatch.model import FindingKind
from lockwatch.scenarios import (
    WEBHOOK_JOBS_DDL,
    ConvoyIncident,
    OrphanIncident,
    WebhookQueueIncident,
    webhook_queue_sql,
)

POLL = 0.01  # seconds between looks at the replay and at the API
GRACE = 1.0  # the target: never later than threshold + one interval + this
GIVE_UP = 10.0  # seconds past the target after which a finding counts as missed


class Replay(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...


THRESHOLD = object()  # in an incident's config: the threshold its key names, as measured


@dataclass(frozen=True, slots=True)
class Expected:
    kind: FindingKind
    threshold: str  # the config key whose value the finding waits for
    times: float = 1.0  # the benchmark's threshold times this, where one would be too short

    def seconds(self, threshold: float) -> float:
        return threshold * self.times


@dataclass(frozen=True, slots=True)
class Incident:
    name: str
    subject: Mapping[str, str]  # what the finding is about, as the API says it
    replay: Callable[[str], Replay]  # started on a DSN of the benchmark database
    expected: tuple[Expected, ...]
    # The target's config beside its dsn and interval (``locks``, ``queues``,
    # ``workers``...), with THRESHOLD for each measured threshold.
    config: Mapping[str, Any] = field(default_factory=dict)
    # Run once on the benchmark database (as its owner) before lockwatch starts.
    setup: Callable[[BenchServer], None] | None = None
    # For a replay that sets the scene first: true once the incident proper
    # has begun. Without it, the incident begins when the replay starts.
    begun: Callable[[Any], bool] | None = None

    def target(self, dsn: str, interval: float, threshold: float) -> dict[str, Any]:
        seconds = {e.threshold: e.seconds(threshold) for e in self.expected}

        def fill(value: Any, key: str | None = None) -> Any:
            if value is THRESHOLD:
                return f"{seconds[str(key)]:g}s"
            if isinstance(value, Mapping):
                return {k: fill(v, k) for k, v in value.items()}
            if isinstance(value, list | tuple):
                return [fill(v, key) for v in value]
            return value

        config: dict[str, Any] = fill(self.config)
        return {**target_config(TARGET, dsn, interval, config.pop("locks", None)), **config}


def _webhook_jobs(server: BenchServer) -> None:
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(WEBHOOK_JOBS_DDL)
        conn.execute(
            sql.SQL("GRANT SELECT ON webhook_jobs TO {}").format(sql.Identifier(LOCKWATCH_ROLE))
        )


INCIDENTS = (
    Incident(
        "convoy (seed 002): a holder hangs in an HTTP call, 5 workers queue",
        {"lock": "42"},
        lambda dsn: ConvoyIncident(dsn, key=42, waiters=5),
        (
            Expected(FindingKind.LOCK_CONVOY, "convoy_wait"),
            Expected(FindingKind.LOCK_HELD_TOO_LONG, "max_hold"),
        ),
        {"locks": {"convoy_waiters": 2, "convoy_wait": THRESHOLD, "max_hold": THRESHOLD}},
    ),
    Incident(
        "orphan (seed 003): a pooled connection goes back idle, still holding",
        {"lock": "7,13"},
        lambda dsn: OrphanIncident(dsn, key=(7, 13)),
        (Expected(FindingKind.LOCK_ORPHANED, "orphan_after"),),
        {"locks": {"orphan_after": THRESHOLD}},
    ),
    Incident(
        "stall (seed 002): a webhook delivery hangs holding lock 42, the queue grows",
        {"queue": "webhooks"},
        lambda dsn: WebhookQueueIncident(dsn, workers=6, rate=4.0, poison_at=4),
        # A window spans several polls, or there is no trend to judge: with
        # four, losing the oldest sample to a few ms of jitter leaves less
        # than the 80 % of the window a queue needs to be judged at all.
        (Expected(FindingKind.QUEUE_STALLED, "window", times=3.0),),
        {
            "queues": [
                {
                    "name": "webhooks",
                    "sql": webhook_queue_sql(),
                    "window": THRESHOLD,
                    "min_growth": 0.2,
                }
            ],
            "workers": [
                {
                    "name": "webhook-workers",
                    "queues": ["webhooks"],
                    "sessions": ["webhook-worker-*"],
                }
            ],
        },
        setup=_webhook_jobs,
        # The stall begins when a worker's delivery hangs on the black hole.
        begun=lambda replay: replay.blackhole.accepted > 0,
    ),
)
# Seed incidents whose detectors the daemon does not run yet; listed in the report.
NOT_YET = (
    ("duplicate start (seed 000): a nightly job runs twice", FindingKind.JOB_DUPLICATE_START),
    ("pooled session (seed 000): session lock through pgbouncer", FindingKind.LOCK_POOLED_SESSION),
)


@dataclass(frozen=True, slots=True)
class Detection:
    incident: str
    kind: FindingKind
    threshold_name: str
    threshold: float
    interval: float
    seconds: float | None  # None: not detected within the target and GIVE_UP

    @property
    def budget(self) -> float:
        return self.threshold + self.interval

    @property
    def met(self) -> bool:
        return self.seconds is not None and self.seconds <= self.budget + GRACE


def _found(daemon: LockwatchProcess, incident: Incident) -> set[FindingKind]:
    findings = json.loads(daemon.get("/api/v1/findings")[1])["findings"]
    return {
        FindingKind(f["kind"])
        for f in findings
        if f["target"] == TARGET
        and all(f["subject"].get(k) == v for k, v in incident.subject.items())
    }


def _begin(replay: Replay, incident: Incident, deadline: float) -> float:
    """Start the replay; the moment the incident began, never later than it did."""
    started = time.monotonic()
    replay.start()
    if incident.begun is None:
        return started
    while not incident.begun(replay):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{incident.name}: the incident never began")
        started = time.monotonic()
        time.sleep(POLL)
    return started


def measure(
    server: BenchServer, incident: Incident, interval: float, threshold: float, workdir: Path
) -> list[Detection]:
    if incident.setup is not None:
        incident.setup(server)
    target = incident.target(server.dsn(LOCKWATCH_ROLE), interval, threshold)
    thresholds = {e.kind: e.seconds(threshold) for e in incident.expected}
    seen: dict[FindingKind, float] = {}
    with LockwatchProcess([target], workdir, f"detect-{len(list(workdir.iterdir()))}") as daemon:
        daemon.wait_for_polls(1)
        replay = incident.replay(server.dsn())
        try:
            began = _begin(replay, incident, time.monotonic() + 60)
            deadline = began + max(thresholds.values()) + interval + GRACE + GIVE_UP
            while len(seen) < len(thresholds) and time.monotonic() < deadline:
                for kind in _found(daemon, incident) & (thresholds.keys() - seen.keys()):
                    seen[kind] = time.monotonic() - began
                time.sleep(POLL)
        finally:
            replay.stop()
    return [
        Detection(
            incident.name, e.kind, e.threshold, thresholds[e.kind], interval, seen.get(e.kind)
        )
        for e in incident.expected
    ]

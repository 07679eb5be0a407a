"""Detection time: seed incidents staged on the benchmark server, one
``lockwatch run`` watching each with a target of its own, the incidents played
one after another, and the time from each beginning to each of its findings
appearing in ``/api/v1/findings``.

Adding an incident is adding an ``Incident`` to ``INCIDENTS`` (and taking it
off ``NOT_YET``): a ``Stage`` that sets the scene and plays the incident,
the target config that watches it, and the findings it must raise.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import psycopg
from psycopg import sql

from bench.daemon import LockwatchProcess, target_config
from bench.server import DATABASE, LOCKWATCH_ROLE, BenchServer
from lockwatch.demo.scenarios import (
    WEBHOOK_JOBS_DDL,
    ConvoyIncident,
    OrphanIncident,
    WebhookQueueIncident,
    webhook_queue_sql,
)
from lockwatch.model.findings import FindingKind
from tests.fixtures.pgbouncer import STATS_USER, PgBouncer

POLL = 0.01  # seconds between looks at the stage and at the API
GRACE = 1.0  # the target: never later than threshold + one interval + this
GIVE_UP = 10.0  # seconds past the target after which a finding counts as missed
THRESHOLD = object()  # in an incident's config: the threshold its key names, as measured
ROOT = Path(__file__).resolve().parent.parent


class Replay(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...


class Stage:
    """An incident set up on the benchmark server, ready to begin; ``end()``
    (or leaving the ``with`` block) ends it and takes the scene down.

    ``target`` and ``top`` are what lockwatch's config needs besides the
    incident's thresholds: more keys for the target, more top-level entries
    (jobs), each of which joins the incident's target.
    """

    def __init__(self) -> None:
        self.target: dict[str, Any] = {}
        self.top: dict[str, Any] = {}

    def begin(self) -> None:
        raise NotImplementedError

    def begun(self) -> bool:
        """True once the incident proper is under way."""
        return True

    def end(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Stage:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.end()


class ReplayStage(Stage):
    """A replay from lockwatch.scenarios, begun by starting it."""

    def __init__(self, replay: Replay, begun: Callable[[], bool] = lambda: True) -> None:
        super().__init__()
        self.replay = replay
        self._begun = begun
        self._started = False

    def begin(self) -> None:
        self._started = True
        self.replay.start()

    def begun(self) -> bool:
        return self._begun()

    def end(self) -> None:
        # A replay that never started has no sessions to end, and some
        # (a producer thread) cannot be stopped before they start.
        if self._started:
            self.replay.stop()


def _convoy(server: BenchServer) -> Stage:
    return ReplayStage(ConvoyIncident(server.dsn(), key=42, waiters=5))


def _orphan(server: BenchServer) -> Stage:
    return ReplayStage(OrphanIncident(server.dsn(), key=(7, 13)))


def _stall(server: BenchServer) -> Stage:
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(WEBHOOK_JOBS_DDL)
        conn.execute(
            sql.SQL("GRANT SELECT ON webhook_jobs TO {}").format(sql.Identifier(LOCKWATCH_ROLE))
        )
    queue = WebhookQueueIncident(server.dsn(), workers=6, rate=4.0, poison_at=4)
    # The stall begins when a worker's delivery hangs on the black hole.
    return ReplayStage(queue, lambda: queue.blackhole.accepted > 0)


class NightlyJobThroughPgBouncer(Stage):
    """Seed 000: two app servers run the nightly job through pgbouncer in
    transaction mode; each takes the leader lock with pg_try_advisory_lock,
    both get it (the lock stays on a pooled server connection), both run."""

    SCHEDULER = ROOT / "tests" / "workloads" / "nightly_scheduler.py"
    RUNS = (
        "SELECT report_date::text AS run_key, started_at, host FROM report_runs"
        " WHERE started_at >= %(since)s"
    )

    def __init__(self, server: BenchServer) -> None:
        super().__init__()
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            for role in ("scheduler", STATS_USER):
                if not conn.execute(
                    "SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)
                ).fetchone():
                    conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS report_runs"
                " (report_date date, host text, started_at timestamptz)"
            )
            conn.execute("GRANT INSERT ON report_runs TO scheduler")
            conn.execute(
                sql.SQL("GRANT SELECT ON report_runs TO {}").format(sql.Identifier(LOCKWATCH_ROLE))
            )
        self.bouncer = PgBouncer(server.cluster, pool_mode="transaction", pool_size=2)
        self.bouncer.start()
        self.target = {"pgbouncer": {"dsn": self.bouncer.admin_dsn()}}
        self.top = {
            "jobs": [
                {
                    "name": "nightly-report",
                    "query": self.RUNS,
                    "schedule": {"cron": "0 3 * * *", "timezone": "Europe/Berlin"},
                }
            ]
        }

    def begin(self) -> None:
        via_pooler = self.bouncer.dsn(DATABASE, user="scheduler")
        for host in ("app-1", "app-2"):
            subprocess.run(
                [sys.executable, str(self.SCHEDULER), via_pooler, host, "2026-11-29"],
                capture_output=True,
                check=True,
                timeout=60,
            )

    def end(self) -> None:
        self.bouncer.close()


@dataclass(frozen=True, slots=True)
class Expected:
    kind: FindingKind
    subject: Mapping[str, str]  # what the finding is about, as the API says it
    threshold: str | None = None  # the config key whose value it waits for, if any
    times: float = 1.0  # the benchmark's threshold times this, where one would be too short

    def seconds(self, threshold: float) -> float:
        return 0.0 if self.threshold is None else threshold * self.times


@dataclass(frozen=True, slots=True)
class Incident:
    name: str
    stage: Callable[[BenchServer], Stage]  # sets the scene, before lockwatch starts
    expected: tuple[Expected, ...]
    # The target's config beside its dsn and interval (``locks``, ``queues``,
    # ``workers``...), with THRESHOLD for each measured threshold.
    config: Mapping[str, Any] = field(default_factory=dict)

    def target(self, name: str, dsn: str, interval: float, threshold: float) -> dict[str, Any]:
        seconds = {e.threshold: e.seconds(threshold) for e in self.expected}

        def fill(value: Any, key: str | None = None) -> Any:
            if value is THRESHOLD:
                return f"{seconds[key]:g}s"
            if isinstance(value, Mapping):
                return {k: fill(v, k) for k, v in value.items()}
            if isinstance(value, list | tuple):
                return [fill(v, key) for v in value]
            return value

        config: dict[str, Any] = fill(self.config)
        return {**target_config(name, dsn, interval, config.pop("locks", None)), **config}


INCIDENTS = (
    Incident(
        "convoy (seed 002): a holder hangs in an HTTP call, 5 workers queue",
        _convoy,
        (
            Expected(FindingKind.LOCK_CONVOY, {"lock": "42"}, "convoy_wait"),
            Expected(FindingKind.LOCK_HELD_TOO_LONG, {"lock": "42"}, "max_hold"),
        ),
        {"locks": {"convoy_waiters": 2, "convoy_wait": THRESHOLD, "max_hold": THRESHOLD}},
    ),
    Incident(
        "orphan (seed 003): a pooled connection goes back idle, still holding",
        _orphan,
        (Expected(FindingKind.LOCK_ORPHANED, {"lock": "7,13"}, "orphan_after"),),
        {"locks": {"orphan_after": THRESHOLD}},
    ),
    Incident(
        "stall (seed 002): a webhook delivery hangs holding lock 42, the queue grows",
        _stall,
        # A window spans several polls, or there is no trend to judge: with
        # four, losing the oldest sample to a few ms of jitter leaves less
        # than the 80 % of the window a queue needs to be judged at all.
        (Expected(FindingKind.QUEUE_STALLED, {"queue": "webhooks"}, "window", times=3.0),),
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
    ),
    Incident(
        "duplicate start (seed 000): a nightly job's leader lock goes through pgbouncer",
        NightlyJobThroughPgBouncer,
        (
            Expected(FindingKind.JOB_DUPLICATE_START, {"job": "nightly-report"}),
            Expected(FindingKind.LOCK_POOLED_SESSION, {"lock": "4242"}),
        ),
    ),
)
# Seed incidents whose detectors the daemon does not run yet; listed in the report.
NOT_YET: tuple[tuple[str, FindingKind], ...] = ()


@dataclass(frozen=True, slots=True)
class Detection:
    incident: str
    kind: FindingKind
    threshold_name: str | None
    threshold: float
    interval: float
    seconds: float | None  # None: not detected within the target and GIVE_UP

    @property
    def budget(self) -> float:
        return self.threshold + self.interval

    @property
    def met(self) -> bool:
        return self.seconds is not None and self.seconds <= self.budget + GRACE


def _found(
    daemon: LockwatchProcess, target: str, expected: tuple[Expected, ...]
) -> set[FindingKind]:
    findings = json.loads(daemon.get("/api/v1/findings")[1])["findings"]
    return {
        e.kind
        for e in expected
        for f in findings
        if f["kind"] == e.kind.value
        and f["target"] == target
        and all(_about(f, k, v) for k, v in e.subject.items())
    }


def _about(finding: Mapping[str, Any], part: str, value: str) -> bool:
    """Whether the finding's subject has ``value`` for ``part``; a lock finding
    about a holder names the lock (its longest hold's key) in its evidence."""
    if finding["subject"].get(part) == value:
        return True
    facts = finding.get("evidence") or {}
    return part == "lock" and str(facts.get("key")) == value


def _begin(stage: Stage, deadline: float) -> float:
    """Begin the incident; the moment it began, never later than it did."""
    began = time.monotonic()
    stage.begin()
    while not stage.begun():
        if time.monotonic() > deadline:
            raise RuntimeError("the incident never began")
        began = time.monotonic()
        time.sleep(POLL)
    return began


def measure(
    server: BenchServer,
    incidents: tuple[Incident, ...],
    interval: float,
    threshold: float,
    workdir: Path,
    say: Callable[[str], None] = lambda _: None,
) -> list[Detection]:
    """Every incident's scene set, one ``lockwatch run`` started watching each
    incident with a target of its own, then the incidents played in turn, each
    scene taken down before the next begins (two of them take lock 42)."""
    dsn = server.dsn(LOCKWATCH_ROLE)
    detections: list[Detection] = []
    with ExitStack() as scenes:
        staged: list[tuple[Incident, str, ExitStack, Stage]] = []
        targets: list[dict[str, Any]] = []
        top: dict[str, list[Any]] = {}
        for number, incident in enumerate(incidents):
            name = f"incident-{number}"
            scene = scenes.enter_context(ExitStack())
            stage = scene.enter_context(incident.stage(server))
            staged.append((incident, name, scene, stage))
            targets.append({**incident.target(name, dsn, interval, threshold), **stage.target})
            for key, entries in stage.top.items():
                top.setdefault(key, []).extend({**entry, "target": name} for entry in entries)
        with LockwatchProcess(targets, workdir, "detect", top) as daemon:
            for incident, name, scene, stage in staged:
                say(f"detecting {incident.name}")
                detections.extend(_detect(daemon, name, incident, stage, interval, threshold))
                scene.close()
    return detections


def _detect(
    daemon: LockwatchProcess,
    target: str,
    incident: Incident,
    stage: Stage,
    interval: float,
    threshold: float,
) -> list[Detection]:
    """One incident played, begun right after one of its target's polls."""
    thresholds = {e.kind: e.seconds(threshold) for e in incident.expected}
    seen: dict[FindingKind, float] = {}
    daemon.wait_for_polls(daemon.polls(target) + 1, target)
    began = _begin(stage, time.monotonic() + 60)
    deadline = began + max(thresholds.values()) + interval + GRACE + GIVE_UP
    while len(seen) < len(thresholds) and time.monotonic() < deadline:
        for kind in _found(daemon, target, incident.expected) - seen.keys():
            seen[kind] = time.monotonic() - began
        time.sleep(POLL)
    return [
        Detection(
            incident.name, e.kind, e.threshold, thresholds[e.kind], interval, seen.get(e.kind)
        )
        for e in incident.expected
    ]

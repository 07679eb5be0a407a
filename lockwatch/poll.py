"""What one poll of a target carries from its sample step to its judgement
(``runner.py``), and the one read about incidents a poll makes: whether the
sessions at their roots still exist."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from lockwatch.detect.incidents import FindingIdentity
from lockwatch.model.findings import Finding, FindingKind, Subject
from lockwatch.model.incidents import HOLDING_SESSIONS, Incident, IncidentRoot, LiveSession
from lockwatch.model.locks import LockSnapshot
from lockwatch.monitors.base import MonitorResult, PollContext, Sampled
from lockwatch.sample.activity import live_sessions
from lockwatch.sample.session import TargetSession


@dataclass
class Poll:
    """What one poll of a target samples, then judges, in order."""

    context: PollContext
    connect_error: str | None = None
    findings: list[Finding] = field(default_factory=list)
    undecided: set[tuple[FindingKind, Subject]] = field(default_factory=set)
    held_kinds: set[FindingKind] = field(default_factory=set)
    target_error: str | None = None
    broken: set[int] = field(default_factory=set)  # monitors whose sample broke, by index
    # Sampled for the judgement: the roots last poll's findings were told
    # with, which sessions at the root of open incidents still exist (None:
    # unknown), whether a serverless server has other clients (None: no look).
    previous: Mapping[FindingIdentity, IncidentRoot] = field(default_factory=dict)
    alive: frozenset[LiveSession] | None = None
    alone: bool | None = None
    monotonic: float = 0.0  # lockwatch's own clock as judgement began

    def read(self, sampled: Sampled) -> None:
        self.target_error = self.target_error or sampled.target_error
        if sampled.snapshot is not None:
            self.context = replace(self.context, snapshot=sampled.snapshot)

    def add(self, result: MonitorResult) -> None:
        self.findings.extend(result.findings)
        self.undecided |= result.undecided
        self.held_kinds |= result.held_kinds
        self.context = replace(
            self.context, lock_findings=(*self.context.lock_findings, *result.findings)
        )

    @property
    def snapshot(self) -> LockSnapshot | None:
        return self.context.snapshot


def sessions_alive(
    incidents: Iterable[Incident], snapshot: LockSnapshot, session: TargetSession
) -> frozenset[LiveSession] | None:
    """Which sessions at the root of the open ``incidents`` still exist: those
    the snapshot shows, and the others as the server says (one query, only
    while some are not in the snapshot: a poll where an incident ends); None
    when it cannot say. Read before judgement, for the incidents that end in it."""
    wanted = {
        (root.pid, root.backend_start)
        for incident in incidents
        if (root := incident.root).kind in HOLDING_SESSIONS and root.pid is not None
    }
    backends = snapshot.backends
    shown = {
        (pid, start)
        for pid, start in wanted
        if pid in backends and start in (None, backends[pid].backend_start)
    }
    asked = live_sessions(session, wanted - shown)
    return None if asked is None else frozenset(shown | asked)

"""Incidents: one explained problem per root cause, above the findings.

Detectors speak in findings, one per (kind, target, subject); a person needs
one story per thing to act on. An incident groups the findings that share a
root (a holding session, a prepared transaction, a pooled backend, a queue
whose chain reaches no holder, a job, a lock nobody holds, a target), and
carries what happened when (its timeline), what it cost (its impact) and what
to do (its next step). The same root gives the same incident across polls and
restarts, so its id and timeline outlive both.
"""

from __future__ import annotations

import enum
import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from lockwatch.model.episodes import BlockingEpisode
from lockwatch.model.evidence import HolderFacts
from lockwatch.model.evidence.json_form import JsonObject, JsonShapeError, from_json, to_json
from lockwatch.model.findings import (
    Finding,
    FindingKind,
    Severity,
    Subject,
    finding_json,
    load_finding,
)
from lockwatch.model.locks import IDLE_STATES
from lockwatch.text import iso_text

SEVERITY_RANK = {severity: rank for rank, severity in enumerate(Severity)}
ROOTS_KEPT = 4096  # fingerprints kept, by the identity of their roots


class RootKind(enum.StrEnum):
    """What an incident's root is: the thing to act on."""

    SESSION = "session"  # a session holding locks: pid + backend_start
    PREPARED = "prepared"  # a prepared transaction holding locks: its gid
    POOLED_BACKEND = "pooled_backend"  # a pooler's server connection holding locks
    QUEUE = "queue"  # a queue whose problem reaches no holder
    JOB = "job"  # a scheduled job
    LOCK = "lock"  # a lock with no holder to blame (a leader lock missing)
    TARGET = "target"  # the target itself (down, or seen through a pooler)


@dataclass(frozen=True, slots=True)
class IncidentRoot:
    """The root an incident is about. Unused parts stay None; the parts that
    name it (see ``identity``) make its fingerprint."""

    kind: RootKind
    target: str
    pid: int | None = None
    backend_start: datetime | None = None  # with pid: one session, as the server reuses pids
    gid: str | None = None  # a prepared transaction
    database: str | None = None
    lock: str | None = None
    queue: str | None = None
    job: str | None = None
    source: str | None = None
    # How people know the root; not part of its identity.
    application_name: str | None = None
    client_addr: str | None = None
    client_port: int | None = None  # finds the client's process: ss -tnp 'sport = :PORT'
    client_hostname: str | None = None
    # The backend may serve several clients (a pooler's, or one nobody can
    # tell): the names above are then unknown, not its last client's.
    client_unknown: bool = False

    @property
    def identity(self) -> tuple[str, ...]:
        """What names the root: the same root gives the same tuple across polls
        and restarts (names and addresses can change; these do not).

        A pooled backend is a server session seen through pgbouncer: it is the
        same root whether or not pgbouncer's view of it shows up in a poll."""
        kind = RootKind.SESSION if self.kind is RootKind.POOLED_BACKEND else self.kind
        return (
            kind.value,
            self.target,
            "" if self.pid is None else str(self.pid),
            "" if self.backend_start is None else iso_text(self.backend_start),
            self.gid or "",
            self.database or "",
            self.lock or "",
            self.queue or "",
            self.job or "",
            self.source or "",
        )

    @property
    def fingerprint(self) -> str:
        """16 hex digits of the root's identity: stable across polls and restarts.

        >>> root = IncidentRoot(RootKind.QUEUE, "main", queue="webhooks")
        >>> root.fingerprint == IncidentRoot(RootKind.QUEUE, "main", queue="webhooks").fingerprint
        True
        >>> root.fingerprint == IncidentRoot(RootKind.QUEUE, "main", queue="mail").fingerprint
        False
        """
        return _fingerprint(self.identity)

    def as_dict(self) -> dict[str, object]:
        return {part.name: getattr(self, part.name) for part in fields(self)}


@functools.lru_cache(maxsize=ROOTS_KEPT)
def _fingerprint(identity: tuple[str, ...]) -> str:
    # A root is fingerprinted each poll while its incident is open: hashed once.
    return hashlib.sha256("\x1f".join(identity).encode()).hexdigest()[:16]


class IncidentState(enum.StrEnum):
    OPEN = "open"
    RESOLVED = "resolved"


class EventKind(enum.StrEnum):
    """The moments of an incident's timeline, from lockwatch's own observations."""

    OPENED = "opened"
    FINDING_JOINED = "finding_joined"  # a finding of a new kind or subject joined
    FINDING_RESOLVED = "finding_resolved"  # one of its findings ended, others remain
    SEVERITY_ROSE = "severity_rose"
    WAITERS = "waiters"  # the waiter count, sampled sparsely
    HOLDER_IDLE = "holder_idle"  # the root holder went idle
    BUDGET_PASSED = "budget_passed"  # a hold or wait passed its budget
    QUEUE_STALLED = "queue_stalled"  # the queue stopped completing
    BACKEND_REUSED = "backend_reused"  # the holder's backend went to another pooled client
    NOTIFIED = "notified"  # a message went out (its channel in the detail)
    ACTION = "action"  # lockwatch terminate acted or refused (what, who, why in the detail)
    RESOLVED = "resolved"
    REOPENED = "reopened"  # its root came back within the reopen grace: the same incident


@dataclass(frozen=True, slots=True)
class TimelineEvent:
    at: datetime
    event: EventKind
    detail: str  # one line for people, free of secrets
    kind: FindingKind | None = None  # the finding kind it is about, if one
    value: float | None = None  # a count or duration, for WAITERS and the like


class Resolution(enum.StrEnum):
    """How an incident ended."""

    RELEASED = "released"  # the holder let go of its locks
    SESSION_ENDED = "session_ended"  # the holding session is gone
    TARGET_BACK = "target_back"  # the target answers again
    CLEARED = "cleared"  # every finding of it stopped being true
    UNWATCHED = "unwatched"  # its target was removed from the config: nobody looks any more


@dataclass(frozen=True, slots=True)
class Impact:
    """What the incident cost so far (at its end, once resolved)."""

    waiter_seconds: float = 0.0  # sum over polls of waiters x interval
    max_waiters: int = 0  # the most sessions waiting at once
    locks_held: int = 0  # the most locks the root held at once
    queue_growth: int | None = None  # jobs the backlog grew by during it; None: no queue
    max_backlog: int | None = None
    missed_runs: int = 0  # job slots missed


@dataclass(frozen=True, slots=True)
class NextStep:
    """What to do about it: printed for people, never run by lockwatch."""

    action: str  # one line: "end the holder's session"
    sql: str | None  # guarded remediation SQL; None when there is none
    cost: str | None  # what running it costs
    runbook: str  # the runbook URL of the incident's leading kind


@dataclass(frozen=True, slots=True)
class Naming:
    """How an incident's alert names what it is about, fixed when it opens: an
    alert whose labels change ends and fires again, so these stay put while it
    is open (``model/incident_text.naming`` words them). Values from database
    clients, one line each; "" where the root has none."""

    holder: str = ""  # the root holder as people know it: "pid 7023 · worker-4 · 10.0.0.5"
    application: str = ""  # the holder's application name when it opened
    database: str = ""
    # the key it is about, by its configured or catalogued name, "webhook-delivery (42)";
    # the first of several
    lock: str = ""
    queue: str = ""  # the queue a holder's incident stalls, when it opened with the stall
    # the holder's query fingerprint (model/fingerprints.py), never a constant
    blocking_query: str = ""


@dataclass(frozen=True, slots=True)
class Incident:
    """One root cause with the findings it explains, its story and its cost."""

    id: str  # stable while it is open, across restarts; a later incident of the same root gets a new id
    fingerprint: str  # the root's
    target: str
    root: IncidentRoot
    title: str  # names the root, then what matters: "pid 7023 webhook-worker-4 holds ..."
    severity: Severity  # the worst of its findings so far while open
    state: IncidentState
    opened_at: datetime
    updated_at: datetime
    resolved_at: datetime | None
    resolution: Resolution | None
    kinds: tuple[FindingKind, ...]  # every kind that has been part of it, first seen first
    findings: tuple[Finding, ...]  # its active findings; at its worst moment once resolved
    finding_count: int  # len(findings) before any cap on what is kept
    timeline: tuple[TimelineEvent, ...]  # bounded
    impact: Impact
    next_step: NextStep
    # The first few locks the root holds now (at its worst once resolved),
    # ``database/lock``, and how many it holds in all.
    locks: tuple[str, ...] = ()
    waiters: int = 0  # sessions waiting on it now (0 once resolved)
    naming: Naming = Naming()  # what its alert names, as it opened
    # When it opened again, its root back within the reopen grace (flapping).
    reopened: tuple[datetime, ...] = ()
    # Its root's blocking episodes (the latest few, oldest first): who waited
    # on it, how long, with what queries; ended once the incident is.
    episodes: tuple[BlockingEpisode, ...] = ()

    @property
    def open(self) -> bool:
        return self.state is IncidentState.OPEN

    @property
    def openings(self) -> tuple[datetime, ...]:
        """Every time it opened: first, then each time it reopened."""
        return (self.opened_at, *self.reopened)


def incident_json(incident: Incident, findings: int | None = None) -> JsonObject:
    """An incident as JSON-ready values, times to the microsecond: the shape of
    ``docs/incidents.schema.json``, the state file and the history. With
    ``findings``, only that many of its findings (``finding_count`` says how
    many it has): a list of incidents stays small whatever one session holds."""
    document = {
        part.name: to_json(getattr(incident, part.name))
        for part in fields(incident)
        if part.name != "findings"
    }
    shown = incident.findings if findings is None else incident.findings[:findings]
    document["findings"] = [finding_json(finding) for finding in shown]
    return document


def _moment(value: Any) -> datetime:
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        raise ValueError("a moment without its zone")
    return moment


def load_incident(entry: Any) -> Incident | None:
    """The incident ``incident_json`` made, or None when ``entry`` is not one:
    the state file's open incidents, the history's resolved ones, ``lockwatch
    incidents``. A finding of it that cannot be read any more is left out."""
    try:
        resolved_at, resolution = entry["resolved_at"], entry["resolution"]
        naming = entry.get("naming")
        return Incident(
            id=str(entry["id"]),
            fingerprint=str(entry["fingerprint"]),
            target=str(entry["target"]),
            root=from_json(IncidentRoot, entry["root"]),
            title=str(entry["title"]),
            severity=Severity(entry["severity"]),
            state=IncidentState(entry["state"]),
            opened_at=_moment(entry["opened_at"]),
            updated_at=_moment(entry["updated_at"]),
            resolved_at=None if resolved_at is None else _moment(resolved_at),
            resolution=None if resolution is None else Resolution(resolution),
            kinds=tuple(FindingKind(kind) for kind in entry["kinds"]),
            findings=tuple(
                f for item in entry["findings"] if (f := load_finding(item)) is not None
            ),
            finding_count=int(entry["finding_count"]),
            timeline=tuple(from_json(TimelineEvent, event) for event in entry["timeline"]),
            impact=from_json(Impact, entry["impact"]),
            next_step=from_json(NextStep, entry["next_step"]),
            locks=tuple(str(lock) for lock in entry.get("locks", ())),
            waiters=int(entry.get("waiters", 0)),
            # an incident saved by an older lockwatch names nothing more than its root
            naming=Naming() if naming is None else from_json(Naming, naming),
            reopened=tuple(_moment(at) for at in entry.get("reopened", ())),
            episodes=tuple(from_json(BlockingEpisode, e) for e in entry.get("episodes", ())),
        )
    except (KeyError, TypeError, ValueError, AttributeError, JsonShapeError):
        return None


@dataclass(frozen=True, slots=True)
class RootLoad:
    """What a holding root holds and makes wait, counted in a poll's lock snapshot."""

    locks_held: int
    locks: tuple[str, ...]  # the first few, ``database/key``
    waiters: int  # sessions waiting on a lock it holds


@dataclass(frozen=True, slots=True)
class RootGroup:
    """One poll's findings of one root (``detect/incidents.py`` groups them;
    the incident book folds them into incidents and words them)."""

    root: IncidentRoot
    findings: tuple[Finding, ...]
    waiters: int  # sessions waiting on the root now
    load: RootLoad | None = None  # None: not a holder, or no snapshot to count in


@dataclass(frozen=True, slots=True)
class IncidentChanges:
    """What one poll of a target did to its incidents: what a notifier needs."""

    target: str = ""
    active: tuple[Incident, ...] = ()
    opened: tuple[Incident, ...] = ()
    worsened: tuple[Incident, ...] = ()  # a new finding kind joined, or its severity rose
    resolved: tuple[Incident, ...] = ()


def active_findings(changes: IncidentChanges) -> dict[tuple[str, str, Subject], Finding]:
    """The findings of the open incidents, by identity: a listener, told of
    incidents only, learns which findings fired and resolved by comparing
    them poll to poll."""
    return {f.identity: f for incident in changes.active for f in incident.findings}


# A session as the server names it: pid + backend_start (None: not seen).
LiveSession = tuple[int, datetime | None]
HOLDING_SESSIONS = (RootKind.SESSION, RootKind.POOLED_BACKEND)
HOLDING = (*HOLDING_SESSIONS, RootKind.PREPARED)  # roots that hold locks


def session_ending(
    root: IncidentRoot, alive: frozenset[LiveSession] | None
) -> tuple[Resolution, str]:
    """How a holding session's incident ended, from which of the ending
    sessions still exist (None: unknown): it let go, or it is gone.

    >>> root = IncidentRoot(RootKind.SESSION, "main", pid=7)
    >>> session_ending(root, frozenset({(7, None)}))[0], session_ending(root, frozenset())[0]
    (<Resolution.RELEASED: 'released'>, <Resolution.SESSION_ENDED: 'session_ended'>)
    """
    if alive is None:
        return (
            Resolution.RELEASED,
            "the holder's locks were let go (released, or its session ended)",
        )
    if (root.pid, root.backend_start) in alive:
        return Resolution.RELEASED, "the holder let go of its locks; its session goes on"
    return Resolution.SESSION_ENDED, "the holder's session ended, and its locks with it"


@dataclass(frozen=True, slots=True)
class Measures:
    """The root holder's numbers, read from the findings' evidence (the longest
    any of them saw); None when no finding says."""

    hold_seconds: float | None = None  # the longest the root holder has held a lock
    idle_seconds: float | None = None  # how long it has run no SQL, while idle
    idle_state: str | None = None  # ``idle``, ``idle in transaction``
    query: str | None = None  # its last query
    holder: HolderFacts | None = None  # as a finding saw it: its state, its transaction


def _is_root(holder: HolderFacts, root: IncidentRoot) -> bool:
    if root.kind is RootKind.PREPARED:
        return holder.prepared is not None and holder.prepared.gid == root.gid
    return holder.pid == root.pid and holder.prepared is None


def holder_measures(root: IncidentRoot, findings: Sequence[Finding]) -> Measures:
    """The one scan for the root holder in the findings' evidence: its hold,
    idle time and state, and last query. A root that holds nothing has none."""
    if root.kind not in HOLDING:
        return Measures()
    hold = idle = None
    state = query = None
    seen: HolderFacts | None = None
    for finding in findings:
        for holder in finding.evidence.named_holders:
            if not isinstance(holder, HolderFacts) or not _is_root(holder, root):
                continue
            seen = seen or holder
            query = query or holder.query
            if holder.held_seconds:
                hold = max(hold or 0.0, holder.held_seconds)
            seconds = holder.state_seconds if holder.state in IDLE_STATES else None
            if seconds is not None and (idle is None or seconds > idle):
                idle, state = seconds, holder.state
    return Measures(hold, idle, state, query, seen)

"""One target's incidents: opened, worsened and resolved poll by poll, with
their timelines and impact, saved with the state file.

The book turns each poll's active findings into root causes (the pure grouping
of ``detect/incidents.py``) and keeps, per root, what a person needs later: when
it began, what joined and when, what it cost, and what to do. An incident's id
is given once, when its root first shows; it outlives restarts (saved with the
state file) and rank reshuffles (roots are named by what stays put), and a
later incident of the same root gets a new one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from lockwatch.model.episodes import BlockingEpisode, merged_episodes
from lockwatch.model.evidence import MissedRunEvidence, QueueEvidence
from lockwatch.model.evidence.json_form import JsonObject
from lockwatch.model.findings import Finding, FindingKind, Subject
from lockwatch.model.incident_text import (
    RUNBOOKS_PATH,
    incident_title,
    naming,
    opening_kinds,
    resolved_title,
)
from lockwatch.model.incidents import (
    HOLDING_SESSIONS,
    SEVERITY_RANK,
    EventKind,
    Impact,
    Incident,
    IncidentChanges,
    IncidentRoot,
    IncidentState,
    LiveSession,
    NextStep,
    Resolution,
    RootGroup,
    RootKind,
    RootLoad,
    TimelineEvent,
    holder_measures,
    session_ending,
)
from lockwatch.model.locks import LockSnapshot
from lockwatch.model.next_step import next_step
from lockwatch.model.remediation import linked_client
from lockwatch.settings.locks import DEFAULT_EPISODE_GAP
from lockwatch.state.episodes import BlockingEpisodes
from lockwatch.state.incident_records import (
    FINDINGS_KEPT,
    Record,
    dump_record,
    load_record,
    with_event,
)
from lockwatch.state.reopen import DEFAULT_REOPEN_GRACE, reopenable, reopened, still_resolved
from lockwatch.text import one_line

RECENT_RESOLVED = 20  # resolved incidents a target's view carries
WAITER_SAMPLE = timedelta(seconds=60)  # a steady waiter count is noted this often at most
SLOTS_KEPT = 1000  # missed job slots counted per incident

ResolvedSink = Callable[[Incident], None]


def incident_id(fingerprint: str, opened_at: datetime) -> str:
    """The root's fingerprint and the millisecond it opened: a later incident
    of the same root (a poll later at the earliest) gets another.

    >>> from datetime import UTC
    >>> incident_id("0123456789abcdef", datetime(2026, 12, 1, 12, 0, tzinfo=UTC))
    '0123456789ab-1796126400000'
    """
    return f"{fingerprint[:12]}-{int(opened_at.timestamp() * 1000)}"


@dataclass(frozen=True, slots=True)
class _Poll:
    now: datetime
    monotonic: float
    # Which sessions at the root of an ending incident still exist; None: unknown.
    alive: frozenset[LiveSession] | None = None
    unwatched: bool = False  # the target was removed: its incidents end unseen
    episodes: Mapping[str, BlockingEpisode] | None = None  # by their root's fingerprint


def _episode(poll: _Poll, fingerprint: str) -> tuple[BlockingEpisode, ...]:
    episode = (poll.episodes or {}).get(fingerprint)
    return () if episode is None else (episode,)


def _rank(findings: Sequence[Finding], waiters: int) -> tuple[int, int, int]:
    worst = min(SEVERITY_RANK[f.severity] for f in findings)
    return (worst, -waiters, -len(findings))


class IncidentBook:
    """The open and recently resolved incidents of one target, worded
    (``model/incident_text.py``) as they are folded: ``runbooks`` is the base
    of their runbook links."""

    def __init__(
        self,
        target: str,
        on_resolved: ResolvedSink | None = None,
        runbooks: str = RUNBOOKS_PATH,
        reopen_grace: float = DEFAULT_REOPEN_GRACE,
        episode_gap: float = DEFAULT_EPISODE_GAP,
    ) -> None:
        self.target = target
        self.episodes = BlockingEpisodes(target, episode_gap)  # its roots' blocking, as it goes
        self.reopen_grace = reopen_grace  # a root back this soon reopens its incident
        self.on_resolved = on_resolved  # where resolved incidents go: the history
        self.runbooks = runbooks
        self._open: dict[str, Record] = {}  # by fingerprint
        self._recent: list[Incident] = []  # resolved, newest first
        self._lock = threading.Lock()  # read from other threads (a retired target's)

    @property
    def open(self) -> tuple[Incident, ...]:
        """The open incidents, worst first, then the oldest."""
        with self._lock:
            incidents = [record.incident for record in self._open.values()]
        return tuple(
            sorted(incidents, key=lambda i: (SEVERITY_RANK[i.severity], i.opened_at, i.id))
        )

    @property
    def recent(self) -> tuple[Incident, ...]:
        with self._lock:
            return tuple(self._recent)

    def recall(self, resolved: Sequence[Incident]) -> None:
        """Take the recently resolved incidents back from the history after a
        restart (newest first; another target's are left out)."""
        mine = [i for i in resolved if i.target == self.target and not i.open]
        mine.sort(key=lambda i: (i.resolved_at or i.updated_at, i.id), reverse=True)
        with self._lock:
            self._recent = mine[:RECENT_RESOLVED]

    def finding_roots(self) -> dict[tuple[str, str, Subject], IncidentRoot]:
        """The root each active finding was told with at the last poll."""
        with self._lock:
            return {
                finding.identity: record.incident.root
                for record in self._open.values()
                for finding in record.incident.findings
            }

    # -- one poll -------------------------------------------------------------

    def update(
        self,
        groups: Sequence[RootGroup],
        now: datetime,
        monotonic: float,
        alive: frozenset[LiveSession] | None = None,
        *,
        unwatched: bool = False,
        snapshot: LockSnapshot | None = None,
    ) -> IncidentChanges:
        """Fold one poll's root causes (``detect.incidents.tell_incidents`` of
        its active findings) into incidents: which opened, got worse, resolved.
        ``monotonic`` is lockwatch's own clock, for the waiter-seconds;
        ``alive``: which sessions at the roots of open incidents still exist,
        read before this judgement (None: unknown): how those that end ended;
        ``unwatched``: the target was removed, so what ends was not seen to end;
        ``snapshot``: the poll's locks, whose waits make the roots' episodes."""
        poll = _Poll(now, monotonic, alive, unwatched, self.episodes.observe(snapshot, now))
        opened: list[Record] = []
        worsened: list[Record] = []
        resolved: list[Incident] = []
        with self._lock:
            seen = set()
            for group in groups:
                fingerprint = group.root.fingerprint
                seen.add(fingerprint)
                record = self._open.get(fingerprint)
                if record is None:
                    record = self._reopened(fingerprint, poll) or self._opened(group, poll)
                    self._open[fingerprint] = record
                    opened.append(record)
                if self._advance(record, group, poll) and record not in opened:
                    worsened.append(record)
            for fingerprint in [f for f in self._open if f not in seen]:
                resolved.append(self._resolve(self._open.pop(fingerprint), poll))
            changes = IncidentChanges(
                target=self.target,
                opened=tuple(record.incident for record in opened),
                worsened=tuple(record.incident for record in worsened),
                resolved=tuple(resolved),
            )
        for incident in resolved:
            if self.on_resolved is not None:
                self.on_resolved(incident)
        return replace(changes, active=self.open)

    def _opened(self, group: RootGroup, poll: _Poll) -> Record:
        root = group.root
        fingerprint = root.fingerprint
        first = min(group.findings, key=lambda f: f.since)
        blocking = next((e.blocker_fingerprint for e in _episode(poll, fingerprint)), None)
        incident = Incident(
            id=incident_id(fingerprint, poll.now),
            fingerprint=fingerprint,
            target=self.target,
            root=root,
            title="",
            severity=first.severity,
            state=IncidentState.OPEN,
            opened_at=poll.now,
            updated_at=poll.now,
            resolved_at=None,
            resolution=None,
            kinds=(),
            findings=(),
            finding_count=0,
            timeline=(),
            impact=Impact(),
            next_step=NextStep("", None, None, ""),  # worded by _advance, at once
            naming=naming(root, group.findings, opening_kinds(group.findings)[0], blocking),
        )
        record = Record(incident, group.findings)
        kinds = ", ".join(dict.fromkeys(f.kind.value for f in group.findings))
        record.note(poll.now, EventKind.OPENED, f"first seen: {kinds}")
        return record

    def _reopened(self, fingerprint: str, poll: _Poll) -> Record | None:
        """The record of the incident this returning root reopens (flapping), if any."""
        resolved = reopenable(self._recent, fingerprint, poll.now, self.reopen_grace)
        if resolved is None:
            return None
        self._recent = [i for i in self._recent if i.id != resolved.id]
        incident, event = reopened(resolved, poll.now)
        record = Record(replace(incident, findings=()), resolved.findings)
        record.note(event.at, event.event, event.detail, value=event.value)
        return record

    def _advance(self, record: Record, group: RootGroup, poll: _Poll) -> bool:
        """Fold one poll into an incident; True when it got worse (a new kind
        joined after it opened, or its severity rose)."""
        findings, load, waiters = group.findings, group.load, group.waiters
        before = record.incident
        worse = self._note_kinds(record, findings, poll.now)
        severity = min(
            (before.severity, *(f.severity for f in findings)), key=lambda s: SEVERITY_RANK[s]
        )
        if SEVERITY_RANK[severity] < SEVERITY_RANK[before.severity] and before.kinds:
            record.note(poll.now, EventKind.SEVERITY_ROSE, f"now {severity.value}")
            worse = True
        # The root holder's numbers, read once for the timeline and the words.
        measures = holder_measures(group.root, findings)
        self._note_holder(record, findings, measures.idle_seconds, waiters, poll.now)
        rank = _rank(findings, waiters)
        if rank <= record.worst_rank:
            record.worst, record.worst_rank = findings, rank
        lead = record.incident.kinds[0]
        record.incident = replace(
            record.incident,
            root=group.root,
            title=incident_title(group.root, findings, load, waiters, lead, measures),
            severity=severity,
            updated_at=poll.now,
            findings=findings,
            finding_count=len(findings),
            impact=self._impact(record, findings, load, waiters, poll),
            next_step=next_step(
                group.root, findings, lead, self.runbooks, record.incident.id, measures
            ),
            locks=before.locks if load is None else load.locks,
            waiters=waiters,
            episodes=merged_episodes(before.episodes, _episode(poll, before.fingerprint)),
        )
        record.last_monotonic = poll.monotonic
        return worse and bool(before.kinds)

    def _note_kinds(self, record: Record, findings: Sequence[Finding], now: datetime) -> bool:
        incident = record.incident
        present = list(opening_kinds(findings))  # the leading one first
        joined = [kind for kind in present if kind not in incident.kinds]
        for kind in joined:
            since = min(f.since for f in findings if f.kind is kind)
            if kind in (FindingKind.LOCK_HELD_TOO_LONG, FindingKind.JOB_TOO_LONG):
                summary = next(f.summary for f in findings if f.kind is kind)
                at = max(since, incident.opened_at)
                record.note(at, EventKind.BUDGET_PASSED, one_line(summary, 300), kind=kind)
            elif kind is FindingKind.QUEUE_STALLED:
                record.note(now, EventKind.QUEUE_STALLED, "the queue stopped completing", kind=kind)
            elif incident.kinds:
                record.note(now, EventKind.FINDING_JOINED, kind.value, kind=kind)
        was = {f.kind for f in incident.findings}
        for kind in sorted(was - set(present)):
            record.note(now, EventKind.FINDING_RESOLVED, kind.value, kind=kind)
        if joined:  # else the incident stays as it was: no copy each poll
            record.incident = replace(record.incident, kinds=(*incident.kinds, *joined))
        return bool(joined)

    def _note_holder(
        self,
        record: Record,
        findings: Sequence[Finding],
        idle: float | None,
        waiters: int,
        now: datetime,
    ) -> None:
        if idle is not None and not record.idle_noted:
            went_idle = max(now - timedelta(seconds=idle), record.incident.opened_at)
            record.note(went_idle, EventKind.HOLDER_IDLE, "the holder went idle, still holding")
        record.idle_noted = idle is not None
        noted, at = record.waiters_noted, record.waiters_noted_at
        steady = at is not None and now - at < WAITER_SAMPLE
        if waiters != noted and not (steady and abs(waiters - noted) < max(1, noted // 2)):
            record.note(now, EventKind.WAITERS, f"{waiters} waiting", value=float(waiters))
            record.waiters_noted, record.waiters_noted_at = waiters, now
        client = linked_client(findings)
        if client is not None and record.linked_client not in (None, client):
            record.note(now, EventKind.BACKEND_REUSED, f"the holder's backend now serves {client}")
        record.linked_client = client or record.linked_client

    def _impact(
        self,
        record: Record,
        findings: Sequence[Finding],
        load: RootLoad | None,
        waiters: int,
        poll: _Poll,
    ) -> Impact:
        impact = record.incident.impact
        interval = 0.0 if record.last_monotonic is None else poll.monotonic - record.last_monotonic
        held = load.locks_held if load is not None else 0
        growth, backlog = impact.queue_growth, impact.max_backlog
        for finding in findings:
            evidence = finding.evidence
            if isinstance(evidence, QueueEvidence):
                start = record.start_depths.setdefault(
                    evidence.queue, evidence.depth_at_window_start
                )
                growth = max(growth or 0, evidence.depth - start)
                backlog = max(backlog or 0, evidence.depth)
            if isinstance(evidence, MissedRunEvidence) and len(record.missed_slots) < SLOTS_KEPT:
                record.missed_slots.update(slot.isoformat() for slot in evidence.missed_slots)
        # The waiters a poll saw are taken to wait until the next one.
        waited = record.incident.waiters * max(0.0, interval)
        return Impact(
            waiter_seconds=round(impact.waiter_seconds + waited, 3),
            max_waiters=max(impact.max_waiters, waiters),
            locks_held=max(impact.locks_held, held),
            queue_growth=growth,
            max_backlog=backlog,
            missed_runs=len(record.missed_slots),
        )

    def _resolve(self, record: Record, poll: _Poll) -> Incident:
        root = record.incident.root
        if poll.unwatched:
            how, detail = Resolution.UNWATCHED, "no longer watched: the target was removed"
        elif root.kind is RootKind.TARGET:
            how, detail = Resolution.TARGET_BACK, "the target answers again"
        elif root.kind is RootKind.PREPARED:
            how, detail = (
                Resolution.RELEASED,
                "the prepared transaction was committed or rolled back",
            )
        elif root.kind in HOLDING_SESSIONS:
            how, detail = session_ending(root, poll.alive)
        else:
            how, detail = Resolution.CLEARED, "every finding of it stopped being true"
        record.note(poll.now, EventKind.RESOLVED, detail)
        impact = record.incident.impact
        if record.last_monotonic is not None:
            waited = record.incident.waiters * max(0.0, poll.monotonic - record.last_monotonic)
            impact = replace(impact, waiter_seconds=round(impact.waiter_seconds + waited, 3))
        incident = replace(
            record.incident,
            state=IncidentState.RESOLVED,
            updated_at=poll.now,
            resolved_at=poll.now,
            resolution=how,
            impact=impact,
            findings=record.worst[:FINDINGS_KEPT],
            finding_count=len(record.worst),
            waiters=0,
            episodes=tuple(replace(e, ended=True) for e in record.incident.episodes),
        )
        incident = replace(incident, title=resolved_title(incident))
        self._recent = [incident, *self._recent][:RECENT_RESOLVED]
        return incident

    def note_event(self, incident_id: str, event: TimelineEvent) -> bool:
        """Put what was done about an incident from outside a poll (a message
        sent, an action taken) on its timeline, once; False for an id the book
        does not know (any more)."""
        with self._lock:
            for record in self._open.values():
                if record.incident.id == incident_id:
                    record.incident = with_event(record.incident, event)
                    return True
            for index, incident in enumerate(self._recent):
                if incident.id == incident_id:
                    self._recent[index] = updated = with_event(incident, event)
                    break
            else:
                return False
        if self.on_resolved is not None and updated is not incident:
            self.on_resolved(updated)
        return True

    # -- the state file ----------------------------------------------------------

    def dump(self) -> list[JsonObject]:
        with self._lock:
            return [dump_record(record) for record in self._open.values()]

    def load(self, entries: object) -> None:
        """Restore the open incidents saved by ``dump``; an entry that cannot be
        read is dropped (its root opens a new incident if it is still true)."""
        restored = {}
        for entry in entries if isinstance(entries, list) else ():
            record = load_record(entry)
            if record is not None and record.incident.target == self.target:
                restored[record.incident.fingerprint] = record
        with self._lock:
            self._open = restored
            self._recent = still_resolved(self._recent, [r.incident for r in restored.values()])

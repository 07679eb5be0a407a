"""What the incident book keeps of an open incident to tell its story
(``state/incidents.py``), saved with the state file and read back, and
timeline events put on an incident in time order, bounded."""

from __future__ import annotations

import bisect
import contextlib
from dataclasses import dataclass, field, replace
from datetime import datetime

from lockwatch.model.evidence.json_form import JsonObject, to_json
from lockwatch.model.findings import Finding, FindingKind, finding_json, load_finding
from lockwatch.model.incidents import (
    SEVERITY_RANK,
    EventKind,
    Incident,
    IncidentState,
    TimelineEvent,
    incident_json,
    load_incident,
)

TIMELINE_FIRST = 10  # events kept from an incident's start...
TIMELINE_LIMIT = 50  # ...and in all, the latest ones after those
FINDINGS_KEPT = 20  # findings a resolved incident keeps from its worst moment


def _at(event: TimelineEvent) -> datetime:
    return event.at


def _bounded(events: list[TimelineEvent]) -> list[TimelineEvent]:
    if len(events) <= TIMELINE_LIMIT:
        return events
    return events[:TIMELINE_FIRST] + events[-(TIMELINE_LIMIT - TIMELINE_FIRST) :]


def with_event(incident: Incident, event: TimelineEvent) -> Incident:
    """``incident`` with ``event`` on its timeline in time order (bounded), once."""
    if event in incident.timeline:
        return incident
    timeline = list(incident.timeline)
    bisect.insort_right(timeline, event, key=_at)
    return replace(incident, timeline=tuple(_bounded(timeline)))


@dataclass
class Record:
    """An open incident and what the book remembers to tell its story."""

    incident: Incident
    worst: tuple[Finding, ...]  # its findings at its worst moment so far
    worst_rank: tuple[int, int, int] = (len(SEVERITY_RANK), 0, 0)
    idle_noted: bool = False
    waiters_noted: int = 0
    waiters_noted_at: datetime | None = None
    linked_client: str | None = None  # pgbouncer's client of the holder's backend
    start_depths: dict[str, int] = field(default_factory=dict)  # queue -> depth at first sight
    missed_slots: set[str] = field(default_factory=set)
    last_monotonic: float | None = None  # unknown after a restart: that interval is not counted

    def note(
        self,
        at: datetime,
        event: EventKind,
        detail: str,
        kind: FindingKind | None = None,
        value: float | None = None,
    ) -> None:
        # In time order: an event dated back (when the holder went idle) goes
        # before what was noted since; equal times keep the order they came in.
        self.incident = with_event(self.incident, TimelineEvent(at, event, detail, kind, value))


def dump_record(record: Record) -> JsonObject:
    return {
        "incident": incident_json(record.incident),
        "worst": [finding_json(finding) for finding in record.worst[:FINDINGS_KEPT]],
        "worst_rank": list(record.worst_rank),
        "idle_noted": record.idle_noted,
        "waiters_noted": record.waiters_noted,
        "waiters_noted_at": None
        if record.waiters_noted_at is None
        else record.waiters_noted_at.isoformat(),
        "linked_client": record.linked_client,
        "start_depths": dict(record.start_depths),
        "missed_slots": to_json(sorted(record.missed_slots)),
    }


def load_record(entry: object) -> Record | None:
    if not isinstance(entry, dict):
        return None
    incident = load_incident(entry.get("incident"))
    if incident is None or incident.state is not IncidentState.OPEN:
        return None
    with contextlib.suppress(KeyError, TypeError, ValueError):
        noted_at = entry["waiters_noted_at"]
        rank = tuple(int(part) for part in entry["worst_rank"])
        return Record(
            incident,
            worst=tuple(f for item in entry["worst"] if (f := load_finding(item)) is not None),
            worst_rank=(rank[0], rank[1], rank[2]),
            idle_noted=bool(entry["idle_noted"]),
            waiters_noted=int(entry["waiters_noted"]),
            waiters_noted_at=None if noted_at is None else datetime.fromisoformat(noted_at),
            linked_client=entry["linked_client"],
            start_depths={str(q): int(d) for q, d in dict(entry["start_depths"]).items()},
            missed_slots={str(slot) for slot in entry["missed_slots"]},
        )
    return None

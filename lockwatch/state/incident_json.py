"""Incidents read back from the JSON ``incident_json`` makes: the state file's
open incidents, the history's resolved ones, ``lockwatch incidents``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from lockwatch.model.evidence.json_form import JsonShapeError, from_json
from lockwatch.model.findings import FindingKind, Severity
from lockwatch.model.incidents import (
    Impact,
    Incident,
    IncidentRoot,
    IncidentState,
    NextStep,
    Resolution,
    TimelineEvent,
)
from lockwatch.state.ledger import load_finding


def _moment(value: Any) -> datetime:
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        raise ValueError("a moment without its zone")
    return moment


def load_incident(entry: Any) -> Incident | None:
    """The incident ``incident_json`` made, or None when ``entry`` is not one.
    A finding of it that cannot be read any more is left out."""
    try:
        findings = tuple(
            finding for item in entry["findings"] if (finding := load_finding(item)) is not None
        )
        resolved_at = entry["resolved_at"]
        resolution = entry["resolution"]
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
            findings=findings,
            finding_count=int(entry["finding_count"]),
            timeline=tuple(from_json(TimelineEvent, event) for event in entry["timeline"]),
            impact=from_json(Impact, entry["impact"]),
            next_step=from_json(NextStep, entry["next_step"]),
            locks=tuple(str(lock) for lock in entry.get("locks", ())),
            waiters=int(entry.get("waiters", 0)),
        )
    except (KeyError, TypeError, ValueError, AttributeError, JsonShapeError):
        return None

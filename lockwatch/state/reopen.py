"""Flapping told once: a root that comes back soon after its incident
resolved reopens that incident (the same id, the same message) rather than
opening a new one.

Pure: the book (``state/incidents.py``) asks which of its recently resolved
incidents a returning root reopens, and takes the incident open again from
here, with the reopening on its timeline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from lockwatch.model.incidents import (
    EventKind,
    Incident,
    IncidentState,
    Resolution,
    TimelineEvent,
)
from lockwatch.settings.incidents import DEFAULT_REOPEN_GRACE
from lockwatch.text import format_duration

__all__ = ["DEFAULT_REOPEN_GRACE", "flapping", "reopenable", "reopened", "still_resolved"]


def reopenable(
    recent: Sequence[Incident], fingerprint: str, now: datetime, grace: float
) -> Incident | None:
    """The resolved incident of this root that ended within ``grace`` seconds
    of ``now``, the latest; None when there is none (or ``grace`` is 0). An
    incident that ended because its target stopped being watched did not
    resolve: a target watched again starts afresh."""
    if grace <= 0:
        return None
    since = now - timedelta(seconds=grace)
    return next(
        (
            incident
            for incident in recent
            if incident.fingerprint == fingerprint
            and incident.resolved_at is not None
            and incident.resolved_at >= since
            and incident.resolution is not Resolution.UNWATCHED
        ),
        None,
    )


def flapping(incident: Incident, now: datetime) -> str:
    """How often it opened and over how long, for a message and the timeline;
    "" when it opened once (``opened 4 times in 52m``)."""
    count = len(incident.openings)
    if count < 2:
        return ""
    return f"opened {count} times in {format_duration((now - incident.opened_at).total_seconds())}"


def reopened(incident: Incident, now: datetime) -> tuple[Incident, TimelineEvent]:
    """``incident`` open again from ``now`` (the same id and story), and the
    event that tells it on its timeline."""
    assert incident.resolved_at is not None
    back = format_duration((now - incident.resolved_at).total_seconds())
    again = replace(
        incident,
        state=IncidentState.OPEN,
        updated_at=now,
        resolved_at=None,
        resolution=None,
        reopened=(*incident.reopened, now),
    )
    detail = f"its root came back {back} after it resolved: {flapping(again, now)}"
    return again, TimelineEvent(now, EventKind.REOPENED, detail, value=float(len(again.openings)))


def still_resolved(recent: Sequence[Incident], open_now: Sequence[Incident]) -> list[Incident]:
    """``recent`` without the incidents open now: one reopened before a restart
    is in the history as it first resolved, and open again in the state file."""
    ids = {incident.id for incident in open_now}
    return [incident for incident in recent if incident.id not in ids]

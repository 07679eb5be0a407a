"""What the notifier delivered, by incident: its own record, apart from the
incidents. A delivery never writes into an incident (the poll thread owns
those); the status page and the API join the two when they read an incident,
so its timeline shows when each channel was told.

Thread-safe: the notifier's threads record, the HTTP threads read. Bounded
(the latest incidents, a few deliveries each) and saved in the state dir, so
the timelines of resolved incidents keep them across a restart.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from lockwatch.model.incidents import EventKind, Incident, TimelineEvent
from lockwatch.state.incident_records import with_event
from lockwatch.state.statefile import StateStore

INCIDENTS_KEPT = 1000  # incidents whose deliveries are kept, the latest told
PER_INCIDENT = 20  # deliveries kept per incident, the latest
NAME = "deliveries"


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message (or the first push of an alert) that reached a channel."""

    target: str
    incident: str  # the incident's id on this lockwatch
    channel: str
    at: datetime


class Deliveries:
    """The notifier's record of what went out, by incident id."""

    def __init__(self, state_dir: Path | None = None) -> None:
        self._store = StateStore(state_dir, prefix="incidents-", keeps="which messages went out")
        self._lock = threading.Lock()
        self._by_incident: dict[str, list[Delivery]] = self._load()

    def _load(self) -> dict[str, list[Delivery]]:
        document = self._store.load(NAME) or {}
        kept: dict[str, list[Delivery]] = {}
        entries = document.get("deliveries")
        for entry in entries if isinstance(entries, list) else ():
            try:
                at = datetime.fromisoformat(entry["at"])
                delivery = Delivery(
                    str(entry["target"]), str(entry["incident"]), str(entry["channel"]), at
                )
            except (KeyError, TypeError, ValueError):
                continue  # one unreadable entry costs that entry
            if at.tzinfo is not None:
                kept.setdefault(delivery.incident, []).append(delivery)
        return kept

    def record(self, target: str, incident: str, channel: str, at: datetime) -> None:
        """``channel`` was told of ``incident`` at ``at`` (from a notifier thread)."""
        delivery = Delivery(target, incident, channel, at)
        with self._lock:
            told = self._by_incident.pop(incident, [])
            told = [*told, delivery][-PER_INCIDENT:]
            self._by_incident[incident] = told  # the latest told last
            while len(self._by_incident) > INCIDENTS_KEPT:
                del self._by_incident[next(iter(self._by_incident))]
            document = self._document()
        self._store.save(NAME, document)

    def _document(self) -> dict[str, Any]:
        return {
            "deliveries": [
                {
                    "target": d.target,
                    "incident": d.incident,
                    "channel": d.channel,
                    "at": d.at.isoformat(),
                }
                for told in self._by_incident.values()
                for d in told
            ]
        }

    def of(self, incident: str) -> tuple[Delivery, ...]:
        with self._lock:
            return tuple(self._by_incident.get(incident, ()))

    def joined(self, incident: Incident) -> Incident:
        """``incident`` with its deliveries in its timeline, as ``notified``
        events in time order (the timeline's bound applies to the whole)."""
        for delivery in self.of(incident.id):
            event = TimelineEvent(delivery.at, EventKind.NOTIFIED, delivery.channel)
            incident = with_event(incident, event)
        return incident

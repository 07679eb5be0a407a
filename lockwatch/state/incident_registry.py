"""Every target's incident book, by target name: for whoever speaks of
incidents by target and id from another thread (the notifier notes what it sent)."""

from __future__ import annotations

import threading
from datetime import datetime

from lockwatch.state.incidents import IncidentBook


class IncidentRegistry:
    """Every target's book, for whoever speaks of incidents by target and id
    (the notifier notes what it sent). Thread-safe."""

    def __init__(self) -> None:
        self._books: dict[str, IncidentBook] = {}
        self._lock = threading.Lock()

    def register(self, book: IncidentBook) -> None:
        with self._lock:
            self._books[book.target] = book

    def forget(self, target: str) -> None:
        with self._lock:
            self._books.pop(target, None)

    def book(self, target: str) -> IncidentBook | None:
        with self._lock:
            return self._books.get(target)

    def note_notified(self, target: str, incident_id: str, channel: str, at: datetime) -> None:
        book = self.book(target)
        if book is not None:
            book.note_notified(incident_id, channel, at)

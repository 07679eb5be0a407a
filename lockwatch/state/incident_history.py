"""Resolved incidents, kept for the postmortem: a file in the state dir by
default, or a table in the PostgreSQL store pings use (shared by instances).

Kept for ``incidents.retention`` (14 days by default) and at most
``incidents.max_kept`` of them, each with its timeline, impact and the findings
at its worst moment (bounded by the book). A failing store costs monitoring
nothing: the error is logged once and counted, the incident stays in memory
(and is lost at the next restart, which the log says). ``check`` tells at
start (and ``check-config``) whether the store can be written at all: a role
without the rights on its table kept everything in memory, silently.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from abc import ABC, abstractmethod
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from lockwatch.model.evidence.json_form import JsonObject, JsonValue
from lockwatch.model.incidents import Incident, incident_json, load_incident
from lockwatch.settings.incidents import DEFAULT_RETENTION, HistoryStore
from lockwatch.settings.targets import Settings
from lockwatch.state.pgstore import StoreConnection, StoreError
from lockwatch.state.statefile import StateStore
from lockwatch.util.clock import Clock, utc_now

log = logging.getLogger(__name__)

HISTORY_NAME = "history"  # <state_dir>/incidents-history.json
MAX_BYTES = 32 * 1024 * 1024  # the history file at most: the oldest go first past it
TABLE = "lockwatch_incidents"
MEMORY_ONLY = (
    "resolved incidents are kept in memory only meanwhile, and every one of them "
    "not written by then is lost at the next restart"
)


def _newest_first(incident: Incident) -> tuple[float, str]:
    moment = incident.resolved_at or incident.updated_at
    return (-moment.timestamp(), incident.id)


class IncidentHistory(ABC):
    """Resolved incidents by id, pruned by age and number."""

    def __init__(
        self, retention: float = DEFAULT_RETENTION, max_kept: int = 1000, clock: Clock = utc_now
    ) -> None:
        self.retention = timedelta(seconds=retention)
        self.max_kept = max_kept
        self.clock = clock
        self.errors_total = 0
        self.up = True  # the last write or read of the store succeeded
        self._last_error: str | None = None
        self._lock = threading.Lock()

    kind = "file"  # lockwatch_history_store_up's store label

    @abstractmethod
    def check(self) -> str | None:
        """What keeps the store from keeping resolved incidents, in words
        (None: nothing); a problem also marks it down."""

    @abstractmethod
    def add(self, incident: Incident) -> None:
        """Keep ``incident`` (again, when its id is known: a later note replaces it)."""

    @abstractmethod
    def resolved(self, since: datetime | None = None) -> list[Incident]:
        """The kept incidents resolved at ``since`` or later, newest first."""

    def get(self, incident_id: str) -> Incident | None:
        return next((i for i in self.resolved() if i.id == incident_id), None)

    @abstractmethod
    def close(self) -> None: ...

    def _cut_off(self) -> datetime:
        return self.clock() - self.retention

    def _failed(self, message: str) -> None:
        self.errors_total += 1
        self.up = False
        if message != self._last_error:
            log.error("%s; %s", message, MEMORY_ONLY)
        self._last_error = message

    def _succeeded(self) -> None:
        if not self.up:
            log.info("the incident history store works again")
        self.up, self._last_error = True, None


class FileHistory(IncidentHistory):
    """``<state_dir>/incidents-history.json``, rewritten atomically on each
    change; in memory only without a state dir. ``reader``: a command reading
    beside the daemon, which neither moves an unreadable file aside nor writes
    (``problem`` says why the file could not be read)."""

    def __init__(
        self,
        directory: Path | None,
        retention: float = DEFAULT_RETENTION,
        max_kept: int = 1000,
        clock: Clock = utc_now,
        *,
        reader: bool = False,
    ) -> None:
        super().__init__(retention, max_kept, clock)
        self._store = StateStore(directory, prefix="incidents-", keeps="resolved incidents")
        self._kept: dict[str, Incident] = {}
        # each kept incident's JSON and its size, made once
        self._encoded: dict[str, tuple[JsonObject, int]] = {}
        self.problem: str | None = None
        if reader:
            document, self.problem = self._store.peek(HISTORY_NAME)
            self._store = StateStore(None)  # a reader writes nothing
        else:
            document = self._store.load(HISTORY_NAME)
        for entry in (document or {}).get("incidents") or []:
            incident = load_incident(entry)
            if incident is not None:
                self._kept[incident.id] = incident
        self._prune()

    def _prune(self) -> None:
        """Drop what is past the retention, past max_kept, or past MAX_BYTES,
        the oldest first."""
        cut_off = self._cut_off()
        newest = sorted(
            (i for i in self._kept.values() if (i.resolved_at or i.updated_at) >= cut_off),
            key=_newest_first,
        )[: self.max_kept]
        kept, size = [], 0
        for incident in newest:
            encoded = self._encoded.get(incident.id)
            if encoded is None:
                document = incident_json(incident)
                encoded = (document, len(json.dumps(document)))
            size += encoded[1]
            if size > MAX_BYTES:
                break
            kept.append((incident, encoded))
        self._kept = {incident.id: incident for incident, _ in kept}
        self._encoded = {incident.id: encoded for incident, encoded in kept}

    def check(self) -> str | None:
        directory = self._store.directory
        if directory is None or os.access(directory, os.W_OK | os.X_OK):
            return None
        self.up = False
        return f"the state dir {directory} cannot be written (incident history)"

    def add(self, incident: Incident) -> None:
        with self._lock:
            self._kept[incident.id] = incident
            self._encoded.pop(incident.id, None)
            self._prune()
            if self._store.directory is None:
                return
            entries: list[JsonValue] = [document for document, _ in self._encoded.values()]
            if not self._store.save(HISTORY_NAME, {"incidents": entries}):
                self.errors_total += 1
                self.up = False
            else:
                self.up = True

    def close(self) -> None:
        """A file is written whole on each change: nothing stays open."""

    def resolved(self, since: datetime | None = None) -> list[Incident]:
        floor = max(since or self._cut_off(), self._cut_off())
        with self._lock:
            kept = list(self._kept.values())
        return sorted(
            (i for i in kept if (i.resolved_at or i.updated_at) >= floor), key=_newest_first
        )


# Made only when missing: CREATE TABLE IF NOT EXISTS asks for CREATE on the
# schema even when the table is there, which a role given only the table's
# rights lacks.
_SCHEMA = """DO $$ BEGIN IF to_regclass('{table}') IS NULL THEN CREATE TABLE {table} (
    id text PRIMARY KEY,
    target text NOT NULL,
    resolved_at timestamptz NOT NULL,
    document jsonb NOT NULL
); END IF; END $$"""
# Replicas of a shard watch the same roots and each tells its own incident of
# one (its id holds the millisecond that replica saw it open): the first one
# written stands for it, and a later one of the same root whose time overlaps
# is not written (a replica that restarts after the end would resolve its copy
# at its restart). The same id again is a later note of the same incident,
# always written (a reopened incident resolves again).
_UPSERT = """INSERT INTO {table} (id, target, resolved_at, document)
SELECT %(id)s, %(target)s, %(resolved_at)s, %(document)s
WHERE EXISTS (SELECT 1 FROM {table} WHERE id = %(id)s) OR NOT EXISTS (
    SELECT 1 FROM {table} AS kept
    WHERE kept.id <> %(id)s AND kept.target = %(target)s
      AND kept.document->>'fingerprint' = %(fingerprint)s
      AND (kept.document->>'opened_at')::timestamptz <= %(resolved_at)s
      AND kept.resolved_at >= %(opened_at)s)
ON CONFLICT (id) DO UPDATE SET resolved_at = EXCLUDED.resolved_at, document = EXCLUDED.document"""
_PRUNE = """DELETE FROM {table} WHERE resolved_at < %(cut_off)s OR id NOT IN (
    SELECT id FROM {table} ORDER BY resolved_at DESC, id LIMIT %(max_kept)s)"""
_SELECT = """SELECT document FROM {table} WHERE resolved_at >= %(since)s
ORDER BY resolved_at DESC, id LIMIT %(max_kept)s"""
_ONE = """SELECT document FROM {table} WHERE id = %(id)s AND resolved_at >= %(since)s"""
# The rights the history needs on its table that the role lacks.
_MISSING_RIGHTS = """SELECT right_needed FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE'])
AS right_needed WHERE NOT has_table_privilege(%(table)s, right_needed)"""


class PostgresHistory(IncidentHistory):
    """A table beside the pinged runs (``pings.dsn``), for instances that share it."""

    def __init__(
        self,
        dsn: str,
        retention: float = DEFAULT_RETENTION,
        max_kept: int = 1000,
        table: str = TABLE,
        clock: Clock = utc_now,
    ) -> None:
        super().__init__(retention, max_kept, clock)
        self._table = table
        self._store = StoreConnection(dsn, "incident history", {"table": table}, (_SCHEMA,))
        self._memory: dict[str, Incident] = {}  # what could not be written yet

    kind = "postgres"

    def check(self) -> str | None:
        with self._lock:
            try:
                rows = self._store.run(_MISSING_RIGHTS, {"table": self._table})
            except StoreError as exc:
                self.up = False
                return str(exc)
        if rows:
            self.up = False
            missing = ", ".join(str(row[0]) for row in rows)
            return f"incident history: the store's role lacks {missing} on table {self._table}"
        return None

    def add(self, incident: Incident) -> None:
        with self._lock:
            self._memory[incident.id] = incident
            try:
                for pending in list(self._memory.values()):
                    self._store.run(
                        _UPSERT,
                        {
                            "id": pending.id,
                            "target": pending.target,
                            "fingerprint": pending.fingerprint,
                            "opened_at": pending.opened_at,
                            "resolved_at": pending.resolved_at or pending.updated_at,
                            "document": json.dumps(incident_json(pending)),
                        },
                    )
                    del self._memory[pending.id]
                self._store.run(_PRUNE, {"cut_off": self._cut_off(), "max_kept": self.max_kept})
                self._succeeded()
            except StoreError as exc:
                self._failed(str(exc))

    def resolved(self, since: datetime | None = None) -> list[Incident]:
        floor = max(since or self._cut_off(), self._cut_off())
        with self._lock:
            try:
                rows = self._store.run(_SELECT, {"since": floor, "max_kept": self.max_kept})
            except StoreError as exc:
                self._failed(str(exc))
                rows = []
            pending = list(self._memory.values())
        found = {i.id: i for i in (load_incident(_document(row[0])) for row in rows) if i}
        found.update({i.id: i for i in pending if (i.resolved_at or i.updated_at) >= floor})
        return sorted(found.values(), key=_newest_first)

    def get(self, incident_id: str) -> Incident | None:
        with self._lock:
            pending = self._memory.get(incident_id)
            if pending is not None:
                return pending
            try:
                rows = self._store.run(_ONE, {"id": incident_id, "since": self._cut_off()})
            except StoreError as exc:
                self._failed(str(exc))
                return None
        return load_incident(_document(rows[0][0])) if rows else None

    def close(self) -> None:
        self._store.close()


def _document(stored: Any) -> Any:
    return json.loads(stored) if isinstance(stored, str) else stored


def open_history(settings: Settings) -> IncidentHistory:
    """The history the settings ask for: the pings' PostgreSQL store when
    ``incidents.history: pings`` and pings have one, the state dir otherwise."""
    kept = settings.incidents
    if kept.history is HistoryStore.PINGS:
        if settings.pings.store_dsn is not None:
            return PostgresHistory(settings.pings.store_dsn, kept.retention, kept.max_kept)
        log.warning(
            "incidents.history is pings, but pings have no dsn: "
            "resolved incidents are kept in the state dir"
        )
    return FileHistory(settings.state_dir, kept.retention, kept.max_kept)

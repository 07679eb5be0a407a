"""The advisory locks a target's queue libraries hold now on purpose, named
from their rows: good_job's and Que's per-job locks (the worker's session
sits idle while the job runs, far longer than any orphan budget) and
good_job's process locks, held for a process's whole life.

Keyed on row ids, they cannot be told from the key alone as the catalogue's
are; the preset of each queue configured on the target knows the rows, and
the lock monitor reads them in the same poll, just before it judges the locks.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from lockwatch.model.catalogue import HeldLocks, KnownLock, Purpose
from lockwatch.model.locks import LockKey
from lockwatch.sample.base import Database, SampleError
from lockwatch.sample.presets.base import SqlPreset
from lockwatch.sample.presets.registry import KNOWN

log = logging.getLogger(__name__)


def held_locks_queries(presets: Iterable[str | None]) -> dict[str, str]:
    """Preset name -> its held-locks query, for the presets that have one."""
    queries = {}
    for name in presets:
        preset = KNOWN.get(name or "")
        if isinstance(preset, SqlPreset) and (query := preset.held_locks_query()) is not None:
            queries[preset.name] = query
    return queries


class HeldLocksReader:
    """Reads the held-on-purpose locks of a target's presets at each poll. A
    query that fails keeps its last answer (a lock is not paged for a failed
    read), and says so in the log once until it works again."""

    def __init__(self, presets: Iterable[str | None]) -> None:
        self.queries = held_locks_queries(presets)
        self._last: dict[str, dict[tuple[str, LockKey], KnownLock]] = {}
        self._failing: set[str] = set()

    def read(self, db: Database) -> HeldLocks:
        for library, query in self.queries.items():
            try:
                rows = db.query(query)
            except SampleError as exc:
                if library not in self._failing:
                    log.warning("the %s locks held on purpose were not read: %s", library, exc)
                    self._failing.add(library)
                continue
            self._failing.discard(library)
            self._last[library] = {
                (str(row["database"]), LockKey.bigint(int(row["key"]))): KnownLock(
                    library, str(row["name"]), Purpose(row["purpose"])
                )
                for row in rows
            }
        return {key: known for held in self._last.values() for key, known in held.items()}

"""The actions file: how ``lockwatch terminate``, a process of its own, gets
what it did onto an incident's timeline, which only the daemon writes.

``<state_dir>/actions-<target>.jsonl`` is append-only: the command appends one
JSON line per attempt (``ActionJournal``: under an exclusive ``flock``, one
``write`` and an ``fsync``), opening it before it acts, so an action that
cannot be recorded is not done. The daemon's runner reads what was appended
since its last read at each poll (``ActionInbox``: complete lines only) and
notes each on its incident (``take_actions``). Where it has read to (the
file's inode and offset) is saved in the target's state file in the same
atomic write as the incidents it noted them on: after a crash both are as
they were, so an entry is noted again only if it was not kept, and never
lost. An entry already on a timeline (the same moment and words) is not
noted twice, for a resolved incident's history that is written apart.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from lockwatch.model.actions import ActionRecord
from lockwatch.model.evidence.json_form import JsonObject, JsonShapeError, from_json, to_json
from lockwatch.model.incidents import EventKind, TimelineEvent
from lockwatch.state.incident_history import IncidentHistory
from lockwatch.state.incident_records import with_event
from lockwatch.state.incidents import IncidentBook

log = logging.getLogger(__name__)

READ_LIMIT = 1 << 20  # bytes read per poll at most; the rest waits for the next


def actions_path(directory: Path, target: str) -> Path:
    return directory / f"actions-{target}.jsonl"


class ActionJournal:
    """The target's actions file, opened for appending (the command's side).

    Opened before anything is done: ``OSError`` then says the action could not
    be recorded. Created by root (``sudo lockwatch terminate``), it is given to
    the state dir's owner, the daemon's user, which must read it."""

    def __init__(self, directory: Path, target: str) -> None:
        self.path = actions_path(directory, target)
        existed = self.path.exists()
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
        if not existed and os.geteuid() == 0:
            owner = directory.stat()
            with contextlib.suppress(OSError):
                os.fchown(self._fd, owner.st_uid, owner.st_gid)

    def append(self, record: ActionRecord) -> None:
        """One line, whole: after a writer killed mid-line, the next line
        still starts on a line of its own (the broken one is skipped)."""
        line = json.dumps(to_json(record), separators=(",", ":"), ensure_ascii=False) + "\n"
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            size = os.fstat(self._fd).st_size
            if size and os.pread(self._fd, 1, size - 1) != b"\n":
                line = "\n" + line
            os.write(self._fd, line.encode("utf-8"))
            os.fsync(self._fd)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> ActionJournal:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@dataclass
class ActionInbox:
    """The daemon's side: what was appended to a target's actions file since
    the last read. ``unsaved`` until the state file kept where it read to."""

    directory: Path | None
    target: str
    inode: int | None = None
    offset: int = 0
    unsaved: bool = False

    def take(self) -> list[ActionRecord]:
        """The entries appended since the last read, in order; an entry that
        cannot be read is logged and skipped. A file replaced or cut shorter
        (rotated) is read from its start."""
        if self.directory is None:
            return []
        path = actions_path(self.directory, self.target)
        try:
            with path.open("rb") as handle:
                stat = os.fstat(handle.fileno())
                if stat.st_ino != self.inode or stat.st_size < self.offset:
                    if self.inode is not None:
                        log.warning("%s was replaced or cut: reading it from its start", path)
                    self.inode, self.offset, self.unsaved = stat.st_ino, 0, True
                if stat.st_size == self.offset:
                    return []
                handle.seek(self.offset)
                chunk = handle.read(READ_LIMIT)
        except FileNotFoundError:
            return []
        except OSError as exc:
            log.error("cannot read %s: %s", path, exc.strerror or exc)
            return []
        whole = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written waits
        self.offset += len(whole)
        self.unsaved = self.unsaved or bool(whole)
        return [record for line in whole.splitlines() if (record := _record(line, path))]

    def dump(self) -> JsonObject:
        return {"inode": self.inode, "offset": self.offset}

    def load(self, document: object) -> None:
        """Where the saved state read to; from the start without one."""
        if isinstance(document, dict):
            inode, offset = document.get("inode"), document.get("offset")
            if isinstance(inode, int) and isinstance(offset, int) and offset >= 0:
                self.inode, self.offset = inode, offset

    def saved(self) -> None:
        self.unsaved = False


def _record(line: bytes, path: Path) -> ActionRecord | None:
    if not line.strip():
        return None
    try:
        return from_json(ActionRecord, json.loads(line))
    except (ValueError, JsonShapeError) as exc:
        log.error("%s: an entry that cannot be read is skipped: %s", path, str(exc)[:200])
        return None


def take_actions(inbox: ActionInbox, book: IncidentBook, history: IncidentHistory | None) -> int:
    """Put what ``lockwatch terminate`` appended since the last poll on the
    incidents' timelines and in the log; how many entries were read."""
    records = inbox.take()
    note_actions(records, book, history)
    return len(records)


def note_actions(
    records: Iterable[ActionRecord], book: IncidentBook, history: IncidentHistory | None
) -> None:
    """Each record on its incident's timeline (an open one, a recently resolved
    one, or one in the history) and in the log."""
    for record in records:
        event = TimelineEvent(record.at, EventKind.ACTION, record.timeline_detail())
        noted = record.target == book.target and book.note_event(record.incident, event)
        if not noted and history is not None:
            kept = history.get(record.incident)
            if kept is not None:
                history.add(with_event(kept, event))
                noted = True
        log.log(
            logging.WARNING if record.done else logging.INFO,
            "incident %s%s: %s",
            record.incident,
            "" if noted else " (no longer kept)",
            event.detail,
        )

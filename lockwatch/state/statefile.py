"""Per-target state on disk: hold times and active findings, written atomically."""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import logging
import os
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
LOCK_FILE = "lockwatch.lock"
# Beside ``target-main.json``: the latest refresh, written without fsync.
RECENT_SUFFIX = ".recent"
KEEP_UNREADABLE = 3  # copies of an unreadable state file kept aside


class StateDirInUseError(OSError):
    """Another lockwatch holds the state dir."""


class StateDirLock:
    """An exclusive ``flock`` on ``<state_dir>/lockwatch.lock`` for as long as
    lockwatch runs: two instances on one state dir would each tell every
    finding and overwrite each other's state. The kernel drops the lock with
    the process, however it ends, so a killed lockwatch leaves none behind."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK_FILE
        self._fd: int | None = None
        fd = self._open(directory)
        if fd is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode("ascii", "replace").strip()
            os.close(fd)
            by = f"lockwatch pid {holder}" if holder.isdigit() else "another lockwatch"
            raise StateDirInUseError(
                f"state dir {directory} is in use by {by}: two on one state dir would "
                "double every notification and overwrite each other's state; stop it, "
                "or give this one a state_dir of its own"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        with contextlib.suppress(OSError):  # only a name for the refusal
            self.path.write_text(f"{os.getpid()}\n", encoding="ascii")
        self._fd = fd

    def _open(self, directory: Path) -> int | None:
        """The lock file, to be locked; None (said once) when it cannot be had: a
        state dir that cannot be written is said loudly by the saves, and costs
        monitoring nothing, so it does not stop lockwatch either."""
        # Read-only: a file kept open for writing would stop the state dir's
        # filesystem from being remounted read-only (the pid is written apart).
        try:
            directory.mkdir(parents=True, exist_ok=True)
            return os.open(self.path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            log.warning(
                "cannot lock the state dir (%s: %s): a second lockwatch on it would go unnoticed",
                self.path,
                exc.strerror or exc,
            )
            return None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None


class StateStore:
    """Reads and writes ``<state_dir>/<prefix><name>.json``: ``target-main.json``
    for a target's hold times and findings, ``notify-ops.json`` for a channel's
    notifications.

    A store without a directory keeps nothing. Write failures never stop
    monitoring: they are logged (once per distinct error) and counted.

    A save that only refreshes what is known (times moved on, nothing fired,
    resolved, taken or released) is not ``durable``: it goes to
    ``<file>.recent`` without an fsync, and the durable file stays as it was.
    A poll that changes nothing then costs the disk no flush, and a power cut
    that loses the refresh leaves the last durable save to start from.
    """

    def __init__(
        self,
        directory: Path | None,
        prefix: str = "target-",
        keeps: str = "hold times and findings",
    ) -> None:
        self.directory = directory
        self.prefix = prefix
        self.keeps = keeps  # what a restart forgets while saves fail, for the log
        self.write_errors_total = 0
        # Per target: the runners of all targets share one store, and one
        # target's errors (or successes) must not make another's log again.
        self._last_errors: dict[str, str] = {}
        self._lock = threading.Lock()

    def _path(self, target: str) -> Path | None:
        return None if self.directory is None else self.directory / f"{self.prefix}{target}.json"

    def _recent(self, target: str) -> Path | None:
        path = self._path(target)
        return None if path is None else path.with_name(path.name + RECENT_SUFFIX)

    def load(self, target: str) -> dict[str, Any] | None:
        """The saved document; None (and the file moved aside) when it cannot be
        read for any reason: lockwatch then starts afresh, it never fails to.
        A refresh newer than the durable file is read instead of it, unless it
        did not survive (a power cut before the kernel wrote it)."""
        recent = self._recent(target)
        if recent is not None and os.path.lexists(recent):
            document, reason = _parse(recent)
            if document is not None:
                return document
            log.warning(
                "the latest refresh of the saved state %s is lost (%s): starting from the "
                "last durable save",
                recent,
                reason,
            )
            with contextlib.suppress(OSError):
                recent.unlink()
        path = self._path(target)
        if path is None or not os.path.lexists(path):
            return None
        document, reason = _parse(path)
        if document is None:
            self.discard(target, reason or "unreadable")
        return document

    def peek(self, target: str) -> tuple[dict[str, Any] | None, str | None]:
        """The saved document as ``load`` reads it, and why it could not be
        read (None: read, or nothing saved), touching nothing: for a command
        reading beside the daemon, which alone repairs its files."""
        recent, path = self._recent(target), self._path(target)
        if recent is not None and os.path.lexists(recent):
            document, _ = _parse(recent)
            if document is not None:
                return document, None
        if path is None or not os.path.lexists(path):
            return None, None
        document, reason = _parse(path)
        return document, None if document is not None else f"{path}: {reason}"

    def saved_names(self) -> list[str]:
        """The names something is saved for in the directory, sorted."""
        if self.directory is None:
            return []
        names = set()
        for suffix in (".json", ".json" + RECENT_SUFFIX):
            for path in self.directory.glob(f"{self.prefix}*{suffix}"):
                names.add(path.name[len(self.prefix) : -len(suffix)])
        return sorted(names)

    def discard(self, target: str, reason: str) -> None:
        """Move a saved state that cannot be used aside, kept for a person to
        look at (the last KEEP_UNREADABLE of them), with one log line; the
        next save starts afresh."""
        path = self._path(target)
        if path is None:
            return
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        aside = path.with_name(f"{path.name}.unreadable-{stamp}")
        try:
            os.replace(path, aside)
        except OSError as exc:
            log.error(
                "cannot read saved state %s (%s), starting afresh; it cannot be moved aside "
                "either: %s",
                path,
                reason,
                exc.strerror or exc,
            )
            return
        log.error(
            "cannot read saved state %s (%s): moved aside to %s, starting afresh",
            path,
            reason,
            aside.name,
        )
        # The last few are enough to look at; a file damaged at every start
        # must not fill the state dir with copies.
        copies = sorted(path.parent.glob(f"{glob.escape(path.name)}.unreadable-*"))
        for old in copies[:-KEEP_UNREADABLE]:
            with contextlib.suppress(OSError):
                old.unlink()

    def forget(self, target: str) -> None:
        """Remove what is kept for ``target`` (no longer configured)."""
        for path in (self._recent(target), self._path(target)):
            if path is None:
                return
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                log.warning("cannot remove %s: %s", path, exc)

    def save(self, target: str, document: dict[str, Any], *, durable: bool = True) -> bool:
        """Write ``document`` for ``target``: fsync'd in place when ``durable``,
        else as the file's refresh (class docstring). False when it failed."""
        durable_path, recent = self._path(target), self._recent(target)
        if durable_path is None or recent is None:
            return True
        with self._lock:
            # After a failed save the durable file may lack what that one had.
            durable = durable or target in self._last_errors
        path = durable_path if durable else recent
        temp_prefix = f".{path.name}."
        temp: str | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(
                "w", encoding="utf-8", dir=path.parent, prefix=temp_prefix, delete=False
            ) as handle:
                temp = handle.name
                # dumps, not dump: json.dump streams through the pure-Python
                # encoder, several times slower on a big document.
                handle.write(
                    json.dumps({"version": FORMAT_VERSION, **document}, separators=(",", ":"))
                )
                if durable:
                    handle.flush()
                    os.fsync(handle.fileno())
            if durable:
                # Before the durable file moves on: a refresh older than it
                # must never be read in its place.
                recent.unlink(missing_ok=True)
            os.replace(temp, path)
        except (OSError, TypeError, ValueError) as exc:
            if temp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temp)
            self._failed(target, f"cannot persist state to {path}: {_reason(exc, temp_prefix)}")
            return False
        with self._lock:
            recovered = self._last_errors.pop(target, None) is not None
        if recovered:
            log.warning("state is being persisted to %s again", path)
        return True

    def _failed(self, target: str, message: str) -> None:
        with self._lock:
            self.write_errors_total += 1
            repeated = self._last_errors.get(target) == message
            self._last_errors[target] = message
        if not repeated:
            log.error(
                "%s; monitoring goes on, but %s will not survive a restart", message, self.keeps
            )


def _parse(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """A state file's document, or None and why it cannot be used."""
    try:
        document = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError, MemoryError) as exc:
        return None, _unreadable(exc)
    if not isinstance(document, dict) or document.get("version") != FORMAT_VERSION:
        return None, "not a state file of this version of lockwatch"
    return document, None


def _unreadable(exc: BaseException) -> str:
    """Why a state file cannot be read, in a few words (a JSON error quotes no
    more than a position)."""
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8"
    if isinstance(exc, RecursionError | MemoryError):
        return "nested or sized past what can be parsed"
    return f"not JSON: {exc}"


def remove_leftovers(directory: Path | None) -> None:
    """Remove the temporary files a kill during a save leaves (``.target-main.json.*``,
    ``.notify-ops.json.*``, ``.incidents-history.json.*``); called at start, under the
    state dir's lock."""
    if directory is None or not directory.is_dir():
        return
    removed = []
    for leftover in directory.glob(".*.json.*"):
        if leftover.name.startswith((".target-", ".notify-", ".incidents-")) and leftover.is_file():
            with contextlib.suppress(OSError):
                leftover.unlink()
                removed.append(leftover.name)
    if removed:
        log.info(
            "removed %d temporary file(s) a write interrupted by a kill left: %s",
            len(removed),
            ", ".join(sorted(removed)),
        )


def _reason(exc: Exception, temp_prefix: str) -> str:
    """Why a save failed, in the same words each time it fails the same way:
    the temp file's random name is left out, so one problem is logged once."""
    if not isinstance(exc, OSError) or not exc.strerror:
        return str(exc)
    names = [os.fsdecode(name) for name in (exc.filename, exc.filename2) if name is not None]
    shown = [name for name in names if not Path(name).name.startswith(temp_prefix)]
    return ": ".join([exc.strerror, *shown])

"""Per-target state on disk: hold times and active findings, written atomically."""

from __future__ import annotations

import contextlib
import fcntl
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

    def load(self, target: str) -> dict[str, Any] | None:
        """The saved document; None (and the file moved aside) when it cannot be
        read for any reason: lockwatch then starts afresh, it never fails to."""
        path = self._path(target)
        if path is None or not os.path.lexists(path):
            return None
        try:
            document = json.loads(path.read_bytes().decode("utf-8"))
        except (OSError, ValueError, RecursionError, MemoryError) as exc:
            self.discard(target, _unreadable(exc))
            return None
        if not isinstance(document, dict) or document.get("version") != FORMAT_VERSION:
            self.discard(target, "not a state file of this version of lockwatch")
            return None
        return document

    def discard(self, target: str, reason: str) -> None:
        """Move a saved state that cannot be used aside, kept for a person to
        look at, with one log line; the next save starts afresh."""
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

    def forget(self, target: str) -> None:
        """Remove what is kept for ``target`` (no longer configured)."""
        path = self._path(target)
        if path is None:
            return
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("cannot remove %s: %s", path, exc)

    def save(self, target: str, document: dict[str, Any]) -> bool:
        path = self._path(target)
        if path is None:
            return True
        temp_prefix = f".{path.name}."
        temp: str | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(
                "w", encoding="utf-8", dir=path.parent, prefix=temp_prefix, delete=False
            ) as handle:
                temp = handle.name
                json.dump({"version": FORMAT_VERSION, **document}, handle, separators=(",", ":"))
                handle.flush()
                os.fsync(handle.fileno())
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

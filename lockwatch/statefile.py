"""Per-target state on disk: hold times and active findings, written atomically."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

FORMAT_VERSION = 1


class StateStore:
    """Reads and writes ``<state_dir>/target-<name>.json``.

    A store without a directory keeps nothing. Write failures never stop
    monitoring: they are logged (once per distinct error) and counted.
    """

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.write_errors_total = 0
        self.last_error: str | None = None

    def _path(self, target: str) -> Path | None:
        return None if self.directory is None else self.directory / f"target-{target}.json"

    def load(self, target: str) -> dict[str, Any] | None:
        path = self._path(target)
        if path is None or not path.exists():
            return None
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            log.error("cannot read saved state %s, starting afresh: %s", path, exc)
            return None
        if not isinstance(document, dict) or document.get("version") != FORMAT_VERSION:
            log.error("ignoring saved state %s: unknown format", path)
            return None
        return document

    def save(self, target: str, document: dict[str, Any]) -> bool:
        path = self._path(target)
        if path is None:
            return True
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(
                "w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.", delete=False
            ) as handle:
                json.dump({"version": FORMAT_VERSION, **document}, handle, separators=(",", ":"))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(handle.name, path)
        except (OSError, TypeError, ValueError) as exc:
            self.write_errors_total += 1
            message = f"cannot persist state to {path}: {exc}"
            if message != self.last_error:
                log.error(
                    "%s; monitoring goes on, but hold times and findings will not survive a restart",
                    message,
                )
            self.last_error = message
            with contextlib.suppress(OSError, NameError, UnboundLocalError):
                os.unlink(handle.name)
            return False
        if self.last_error is not None:
            log.warning("state is being persisted to %s again", path)
        self.last_error = None
        return True

"""The latest state of every target, shared between the poll loop (writer) and
the publishers (readers). Readers get immutable views; nothing here does I/O."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from lockwatch.model.findings import Finding
from lockwatch.settings.targets import Target
from lockwatch.state.target_view import TargetView


@dataclass
class Board:
    """Thread-safe holder of one ``TargetView`` per target."""

    monotonic: Callable[[], float] = time.monotonic
    _views: dict[str, TargetView] = field(default_factory=dict)
    _progress: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _observers: list[Callable[[TargetView], None]] = field(default_factory=list)

    def register(self, target: Target) -> None:
        with self._lock:
            old = self._views.get(target.name)
            self._views[target.name] = (
                TargetView(target) if old is None else replace(old, target=target)
            )

    def forget(self, name: str) -> None:
        with self._lock:
            self._views.pop(name, None)

    def subscribe(self, observer: Callable[[TargetView], None]) -> None:
        """Have ``observer`` called with every view published from now on, in the
        publishing thread: for what needs each poll, not just the latest."""
        self._observers.append(observer)

    def publish(self, view: TargetView) -> None:
        with self._lock:
            self._views[view.target.name] = view
            self._progress = self.monotonic()
        for observer in self._observers:
            observer(view)

    def view(self, name: str) -> TargetView | None:
        with self._lock:
            return self._views.get(name)

    def views(self) -> tuple[TargetView, ...]:
        with self._lock:
            return tuple(self._views[name] for name in sorted(self._views))

    def findings(self) -> tuple[Finding, ...]:
        return tuple(finding for view in self.views() for finding in view.findings)

    def seconds_since_progress(self) -> float | None:
        """Seconds since any poll finished; None before the first one."""
        with self._lock:
            return None if self._progress is None else self.monotonic() - self._progress

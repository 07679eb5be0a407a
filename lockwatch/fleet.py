"""The targets of a fleet: the config's own, those its target sources
discover, and the share of them this shard watches.

A :class:`Fleet` reads each target source on its own schedule from one thread
(a file when it changed, an endpoint every ``refresh_interval``) and keeps the
last good list of each: a source that fails is logged, counted and shown as
down, and its targets stay watched until it answers again. When a list
changes it calls ``on_change``; the daemon then applies
:meth:`Fleet.watched` through the same path as a config reload.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

from lockwatch.model.discovery import FleetStatus, SourceHealth, TargetGroup
from lockwatch.sample.base import SampleError
from lockwatch.sample.discovery import FileSd, HttpSd, open_source
from lockwatch.settings.discovery import discovered_targets
from lockwatch.settings.sharding import Shard
from lockwatch.settings.sources import TargetSource
from lockwatch.settings.targets import Settings, Target
from lockwatch.state.pace import BACKOFF_CAP
from lockwatch.state.target_view import TargetView
from lockwatch.util.clock import utc_now

log = logging.getLogger(__name__)

LONGEST_NAP = 1.0  # seconds the reading thread sleeps at most between looks
DEFAULT_KEEP = 3600.0  # a vanished target whose source is gone from the config
SUMMARY_EVERY = 60.0  # seconds between two summaries of the unreachable targets, at least
NAMES_SAID = 5  # unreachable targets named in a summary; the rest counted


@dataclass
class _Reading:
    """One source: its reader, its last good list and its health."""

    source: TargetSource
    reader: FileSd | HttpSd
    due: float = 0.0
    groups: tuple[TargetGroup, ...] | None = None  # None until a read succeeded
    reads: int = 0
    errors: int = 0
    last_success: datetime | None = None
    error: str | None = None
    problems: tuple[str, ...] = field(default=())
    made: int = 0


class Fleet:
    """Every target of the config and its sources; this shard's part of them."""

    def __init__(
        self,
        settings: Settings,
        shard: Shard,
        on_change: Callable[[], None] = lambda: None,
        clock: Callable[[], datetime] = utc_now,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.shard = shard
        self._monotonic = monotonic
        self._on_change = on_change
        self._clock = clock
        self._lock = threading.Lock()
        self._readings: dict[str, _Reading] = {}
        self._settings = settings
        self._watched = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.configure(settings)

    def configure(self, settings: Settings) -> None:
        """Take the sources of a (re)read config: an unchanged source keeps its
        reader and health; a changed one gets a new reader, read at once, and
        keeps its last good list meanwhile, so its targets do not flap."""
        with self._lock:
            old, self._readings = self._readings, {}
            for source in settings.target_sources:
                kept = old.pop(source.name, None)
                if kept is not None and kept.source == source:
                    self._readings[source.name] = kept
                    continue
                reading = _Reading(source, open_source(source))
                if kept is not None:
                    kept.reader.close()
                    reading.groups = kept.groups
                self._readings[source.name] = reading
            for gone in old.values():
                gone.reader.close()
            self._settings = settings

    def start(self) -> None:
        """Read the sources from a thread of their own; started even without
        sources, which a reload may bring."""
        self._thread = threading.Thread(target=self._loop, name="target-sources", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            for reading in self._readings.values():
                reading.reader.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                if self.refresh():
                    self._on_change()
            except Exception:
                log.exception("reading the target sources failed unexpectedly; reading goes on")
            self._stop.wait(self.nap())

    def nap(self) -> float:
        """Seconds until the next source is due, at most LONGEST_NAP; with no
        source at all, LONGEST_NAP (a reload may bring one), never 0: the
        thread must not spin, taking the interpreter from the polls."""
        now = self._monotonic()
        with self._lock:
            due = min((r.due for r in self._readings.values()), default=now + LONGEST_NAP)
        return min(LONGEST_NAP, max(0.0, due - now))

    def refresh(self) -> bool:
        """Read every source that is due; True when a list changed."""
        now = self._monotonic()
        with self._lock:
            due = [r for r in self._readings.values() if r.due <= now]
        changed = False
        for reading in due:
            reading.due = now + reading.source.every
            try:
                groups = reading.reader.read()
            except SampleError as exc:
                self._failed(reading, str(exc))
                continue
            except Exception as exc:  # still the source's error: never the daemon's
                what = f"{reading.reader.what}: reading failed unexpectedly"
                self._failed(reading, f"{what}: {type(exc).__name__}")
                continue
            with self._lock:
                reading.reads += 1
                if reading.error is not None:
                    log.info("%s answers again", reading.reader.what)
                reading.error, reading.last_success = None, self._clock()
                changed |= groups != reading.groups
                reading.groups = groups
        return changed

    def _failed(self, reading: _Reading, error: str) -> None:
        with self._lock:
            reading.reads += 1
            reading.errors += 1
            if error != reading.error:
                kept = "nothing yet" if reading.groups is None else "its last good list"
                log.error("%s; watching %s until it answers", error, kept)
            reading.error = error

    def all_targets(self, settings: Settings) -> tuple[Target, ...]:
        """The config's targets, then each source's in order; a name already
        taken keeps its first target."""
        found = {target.name: target for target in settings.targets}
        modules = {module.name: module for module in settings.auth_modules}
        defaults = dict(settings.target_defaults)
        with self._lock:
            readings = list(self._readings.values())
        for reading in readings:
            if reading.groups is None:
                continue
            targets, problems = discovered_targets(
                reading.source, reading.groups, modules, defaults
            )
            taken = [t.name for t in targets if t.name in found]
            problems += tuple(f"target {name!r} is already defined; ignored" for name in taken)
            with self._lock:
                if problems != reading.problems:
                    for problem in problems:
                        log.warning("%s: %s", reading.reader.what, problem)
                reading.problems, reading.made = problems, len(targets) - len(taken)
            for target in targets:
                found.setdefault(target.name, target)
        return tuple(found.values())

    def watched(self, settings: Settings) -> Settings:
        """``settings`` with the targets this shard watches."""
        mine = tuple(t for t in self.all_targets(settings) if self.shard.owns(t.instance))
        self._watched = len(mine)
        return replace(settings, targets=mine)

    def keep_vanished(self, source: str) -> float:
        with self._lock:
            reading = self._readings.get(source)
        return DEFAULT_KEEP if reading is None else reading.source.keep_vanished

    def status(self) -> FleetStatus:
        with self._lock:
            sources = tuple(
                SourceHealth(
                    name=r.source.name,
                    kind=r.source.kind,
                    up=r.error is None and r.groups is not None,
                    targets=r.made,
                    rejected=len(r.problems),
                    reads_total=r.reads,
                    errors_total=r.errors,
                    last_success=r.last_success,
                    error=r.error,
                )
                for r in self._readings.values()
            )
        return FleetStatus(self.shard.index, self.shard.count, self._watched, sources)


class UnreachableSummary:
    """One log line for the targets that cannot be reached, when which of them
    changed (at most every SUMMARY_EVERY): a fleet of 3,000 of them logs a
    line a minute at most, on top of each target's own line when it went down."""

    def __init__(self) -> None:
        self._said: frozenset[str] = frozenset()
        self._at: float | None = None

    def observe(self, views: tuple[TargetView, ...], now: float) -> None:
        if self._at is not None and now - self._at < SUMMARY_EVERY:
            return
        down = sorted(v.target.name for v in views if v.status is not None and not v.up)
        if frozenset(down) == self._said:
            return
        self._said, self._at = frozenset(down), now
        if not down:
            log.info("every target answers again")
            return
        more = len(down) - NAMES_SAID
        names = ", ".join(down[:NAMES_SAID]) + (f" and {more} more" if more > 0 else "")
        log.warning(
            "%d of %d target(s) cannot be sampled, each looked at less often while it "
            "fails (up to every %gs): %s",
            *(len(down), len(views), BACKOFF_CAP, names),
        )

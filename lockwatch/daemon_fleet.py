"""The daemon's fleet: the targets it starts with (the config's and what its
sources list, this shard's part), changed source lists applied like a reload,
vanished targets set aside for ``keep_vanished`` and retired after, and
targets removed from the config retired at once. A mixin of
:class:`lockwatch.daemon.Daemon`, kept apart by concern."""

from __future__ import annotations

import logging
import threading
import time

from lockwatch.fleet import Fleet, UnreachableSummary
from lockwatch.runner import IncidentListener, TargetRunner
from lockwatch.settings.sharding import Shard
from lockwatch.settings.targets import Settings
from lockwatch.state.board import Board
from lockwatch.state.ledger import log_findings
from lockwatch.state.statefile import StateStore
from lockwatch.util.clock import Clock

log = logging.getLogger("lockwatch.daemon")


class FleetFollower:
    """What the daemon does with its fleet; the daemon gives the rest."""

    board: Board
    store: StateStore
    configured: Settings  # as the config file says, before discovery
    _clock: Clock
    _listeners: tuple[IncidentListener, ...]

    def _apply(self, settings: Settings, what: str = "config reloaded") -> None:
        raise NotImplementedError  # the daemon's

    def _discover(self, settings: Settings, shard: Shard | None, clock: Clock) -> Settings:
        """The targets this instance starts with: the config's and what its
        sources list now, this shard's part of them."""
        self.configured = settings  # as the config file says, before discovery
        self._fleet_changed = threading.Event()
        self._unreachable = UnreachableSummary()
        self._parked: dict[str, tuple[TargetRunner, float]] = {}
        self.fleet = Fleet(
            settings,
            shard or settings.sharding,
            on_change=self._fleet_changed.set,
            clock=clock,
        )
        self.fleet.refresh()
        return self.fleet.watched(settings)

    def _follow_fleet(self) -> None:
        """Apply changed source lists; retire what stayed vanished too long."""
        if self._fleet_changed.is_set():
            self._fleet_changed.clear()
            self._apply(self.fleet.watched(self.configured), "target sources changed")
        now = time.monotonic()
        for name, (runner, since) in list(self._parked.items()):
            if now - since >= self.fleet.keep_vanished(runner.target.discovered or ""):
                del self._parked[name]
                self._retire(runner)

    def _unpark(self, name: str) -> TargetRunner | None:
        parked = self._parked.pop(name, None)
        return None if parked is None else parked[0]

    def _set_aside(self, runner: TargetRunner) -> None:
        """A (stopped) target gone from the config is retired; one gone from
        discovery waits: its state file, findings and incidents stay (unresolved,
        unpublished) for ``keep_vanished``, and a new runner takes them over if
        it comes back."""
        if runner.target.discovered is None:
            self._retire(runner)
            return
        self.board.forget(runner.target.name)
        self._parked[runner.target.name] = (runner, time.monotonic())

    def _retire(self, runner: TargetRunner) -> None:
        """A (stopped) target removed from the config: its findings resolve (logged
        and told once, as if its problems were gone: nobody watches them any more)
        and its state file goes, so re-adding it later starts afresh."""
        name = runner.target.name
        self.board.forget(name)
        log_findings(runner.ledger.update(()))
        incidents = runner.incidents.update((), self._clock(), time.monotonic(), unwatched=True)
        for listener in self._listeners:
            try:
                listener(incidents)
            except Exception:
                log.exception("resolving the findings of removed target %s", name)
        self.store.forget(name)

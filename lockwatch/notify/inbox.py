"""What both kinds of notifier worker share: the inbox the poll threads drop
each target's incidents into, and the backoff between failed attempts.

A channel's worker (``service.ChannelWorker``) and an Alertmanager channel's
(``alertmanager.AlertmanagerWorker``) read the same inbox shape from their own
threads; a poll thread only drops its target's latest incidents in, and never
waits on I/O to do it.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from lockwatch.model.incidents import Incident


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delays between delivery attempts: exponential with jitter, capped."""

    first: float = 1.0
    factor: float = 2.0
    cap: float = 300.0
    give_up_after: float = 86400.0  # seconds a message may stay undeliverable
    max_retry_after: float = 3600.0  # a receiver's own delay is honoured up to this

    def delay(self, attempts: int, rng: random.Random) -> float:
        """Seconds before attempt ``attempts + 1``: half to all of the exponential step.

        >>> Backoff().delay(1, random.Random(1)) <= 1.0, Backoff().delay(20, random.Random(1)) <= 300
        (True, True)
        """
        step = min(self.cap, self.first * self.factor ** max(attempts - 1, 0))
        return step * (0.5 + rng.random() / 2)

    def after(self, attempts: int, retry_after: float | None, rng: random.Random) -> float:
        """Seconds before trying again after ``attempts`` failures in a row: the
        receiver's own ``retry_after`` when it gave one (up to ``max_retry_after``),
        else the exponential step.

        >>> Backoff().after(3, 7200.0, random.Random(1)), Backoff().after(1, -5.0, random.Random(1))
        (3600.0, 0.0)
        """
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        return self.delay(attempts, rng)


DEFAULT_BACKOFF = Backoff()


@dataclass(frozen=True, slots=True)
class Mail:
    """What a worker takes out of its inbox at one look."""

    latest: dict[str, tuple[Incident, ...]]  # each target's open incidents, after its latest poll
    resolved: dict[str, Incident]  # by id: resolved since the last look
    offered: frozenset[str] = field(default_factory=frozenset)  # targets polled since


class Inbox:
    """The incidents the poll threads hand one worker. Thread-safe; ``wake``
    is called after each offer (the worker's event, set)."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self._wake = wake
        self._lock = threading.Lock()
        self._latest: dict[str, tuple[Incident, ...]] = {}
        self._resolved: dict[str, Incident] = {}
        self._offered: set[str] = set()

    def offer(
        self, target: str, active: tuple[Incident, ...], resolved: tuple[Incident, ...] = ()
    ) -> None:
        """The incidents open on ``target`` after its latest poll, and those it
        resolved; never blocks on I/O."""
        with self._lock:
            self._latest[target] = active
            self._resolved.update((incident.id, incident) for incident in resolved)
            self._offered.add(target)
        self._wake()

    def take(self) -> Mail:
        """Every target's latest incidents, and what resolved and which targets
        were polled since the last take."""
        with self._lock:
            mail = Mail(dict(self._latest), self._resolved, frozenset(self._offered))
            self._resolved, self._offered = {}, set()
        return mail

    def close_target(self, target: str) -> None:
        """``target`` is watched no more: it has no open incident from now on."""
        with self._lock:
            self._latest[target] = ()

    def keep_resolved_since(self, horizon: datetime) -> None:
        """Drop what resolved before ``horizon`` (kept for a takeover to tell)."""
        with self._lock:
            self._resolved = {
                key: incident
                for key, incident in self._resolved.items()
                if (incident.resolved_at or incident.updated_at) >= horizon
            }

    def incident_id(self, target: str, fingerprint: str) -> str | None:
        """The id this lockwatch gives the open incident of a root, if one is."""
        with self._lock:
            mine = (i.id for i in self._latest.get(target, ()) if i.fingerprint == fingerprint)
            return next(mine, None)

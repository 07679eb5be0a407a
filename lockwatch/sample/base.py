"""The sampling framework: what a source is, the context it samples in, and
:class:`SourceRunner`, which gives each source its own schedule and keeps its
failures from hurting the others (logged once, counted, backed off, and told
as a ``target_down`` finding whose subject names the source).

The samplers in this folder implement :class:`Source`; this module imports
none of them.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from psycopg import sql

if TYPE_CHECKING:
    # Both are loaded when a source is made or fails: the errors here are
    # caught by commands (check-config's look at the queue libraries) that
    # never build the views and the findings' evidence (issue 32).
    from lockwatch.model.evidence.targets import SourceBlocker
    from lockwatch.model.views import SourceHealth

log = logging.getLogger(__name__)

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)

# A failing source is retried after its interval doubled per failure in a row,
# at most this many intervals apart: a dead Redis costs one timeout per retry.
MAX_BACKOFF_INTERVALS = 8
JITTER = 0.2


class SampleError(Exception):
    """Sampling failed; the message is safe to show (no secrets)."""


class TimedOutError(SampleError):
    """A statement cancelled by statement_timeout or lock_timeout: it may
    have waited on a lock someone else holds."""


class BlockedError(SampleError):
    """A source's query timed out waiting on locks these sessions hold."""

    def __init__(self, message: str, blocked_by: tuple[SourceBlocker, ...]) -> None:
        super().__init__(message)
        self.blocked_by = blocked_by


class TargetUnavailableError(SampleError):
    """A source needs the target's database session and there is none: not the
    source's own failure (the target's ``target_down`` already says so)."""


class Database(Protocol):
    """The target's read-only session, lent to sources for the rest of a poll."""

    def query(
        self, query: str | sql.SQL | sql.Composed, params: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """Rows as dicts; raises SampleError (TargetUnavailableError without a session)."""
        ...


@dataclass(frozen=True, slots=True)
class SampleContext:
    now: datetime
    db: Database | None  # None while the target's database cannot be sampled

    def database(self) -> Database:
        if self.db is None:
            raise TargetUnavailableError("not sampled: the target's database is down")
        return self.db


class Source(Protocol[R_co]):
    def sample(self, context: SampleContext) -> R_co:
        """One reading; raises SampleError with a message free of secrets."""
        ...

    def close(self) -> None: ...


@dataclass
class SourceRunner(Generic[R]):
    """One source on its own schedule, with its failures contained.

    ``interval`` None samples at every poll of the target. After a failure the
    next attempt waits the interval doubled per failure in a row (capped, with
    jitter), so a source that hangs until its timeout slows its target's polls
    only now and then.
    """

    target: str
    name: str  # "queue/webhooks", "workers/webhook-workers": unique within the target
    source: Source[R]
    interval: float | None = None
    base_interval: float = 10.0  # the target's, for the backoff when interval is None
    monotonic: Callable[[], float] = time.monotonic
    jitter: Callable[[], float] = random.random
    _next_due: float | None = None
    _failures: int = 0
    _health: SourceHealth = field(init=False)

    def __post_init__(self) -> None:
        from lockwatch.model.views import SourceHealth

        self._health = SourceHealth(self.name)

    @property
    def health(self) -> SourceHealth:
        return self._health

    def poll(self, context: SampleContext) -> R | None:
        """The reading, or None when not due, failed, or waiting for the target."""
        now = self.monotonic()
        if self._next_due is not None and now < self._next_due:
            return None
        health = self._health
        try:
            reading = self.source.sample(context)
        except TargetUnavailableError as exc:
            self._next_due = None
            self._health = health.skipped(context.now, str(exc))
            return None
        except SampleError as exc:
            self._failures += 1
            self._schedule_retry(now)
            message = str(exc)
            if health.failing_since is None:
                log.error("%s: %s cannot be sampled: %s", self.target, self.name, message)
            blocked_by = exc.blocked_by if isinstance(exc, BlockedError) else ()
            self._health = health.failed(context.now, message, blocked_by)
            return None
        if health.failing_since is not None:
            log.info("%s: %s is sampled again", self.target, self.name)
        self._failures = 0
        self._next_due = None if self.interval is None else now + self.interval
        self._health = health.succeeded(context.now)
        return reading

    def _schedule_retry(self, now: float) -> None:
        interval = self.interval if self.interval is not None else self.base_interval
        backoff = interval * min(2 ** (self._failures - 1), MAX_BACKOFF_INTERVALS)
        if self._failures == 1 and self.interval is None:
            # the first failure of a per-poll source is retried at the next poll
            self._next_due = None
            return
        self._next_due = now + backoff * (1 - JITTER + 2 * JITTER * self.jitter())

    def close(self) -> None:
        self.source.close()

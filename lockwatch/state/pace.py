"""How often a target is polled: every ``interval``, or less often while its
lock manager is contended.

Every query on ``pg_locks`` has the server copy its lock table while holding
all of the lock manager's partition locks; while the server's own sessions
queue on those (``LWLock:LockManager``), each poll makes them queue longer.
Each poll reads how many sessions wait there (advisory_locks.sql), lockwatch's
own left out (they queue behind each other's reads, not the server's); when some
did at ``CONTENDED`` of the last ``WINDOW`` polls, the pace halves (down to
one poll every ``SLOWEST`` intervals), and after ``CALM`` polls in a row with
none it doubles again. Each change is said in the log and the pace in force
is a metric; the slots of the interval a slowed pace leaves out are counted
as skipped, as are those a poll that overran its interval missed.

A target that cannot be reached (its connection fails) is looked at less
and less often: twice the interval after the first failure, doubling up to
``BACKOFF_CAP``, each wait shortened by up to a quarter at random so that a
fleet that went away together does not come back in step. Its first
answer brings the pace back at once.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

WINDOW = 5  # polls looked back at
CONTENDED = 2  # of them with sessions waiting on the lock manager: slow down
CALM = 5  # polls in a row with none: speed up again
SLOWEST = 4  # times the interval, at most
# Seconds between looks at an unreachable target, at most (or its interval, if
# longer): the daemon's stall limit (/healthz, systemd's watchdog) allows for it.
BACKOFF_CAP = 30.0
JITTER = 0.25  # of each backoff wait, taken off at random

# Why slots of a target's interval went unpolled (lockwatch_poll_slots_skipped_total).
OVERRAN = "overran"  # a poll took longer than the interval
CONTENDED_REASON = "contended"  # the pace was slowed while the lock manager was contended
UNREACHABLE = "unreachable"  # the target could not be reached: backing off
REASONS = (OVERRAN, CONTENDED_REASON, UNREACHABLE)


@dataclass
class PollPace:
    """The pace of one target's polls, poll after poll (``observe``)."""

    interval: float
    factor: int = 1  # the interval is multiplied by it
    # Slots of the interval left unpolled so far, by why (REASONS).
    skipped: dict[str, int] = field(default_factory=dict)
    _recent: deque[int] = field(default_factory=lambda: deque(maxlen=WINDOW))
    _calm: int = 0  # polls in a row with no session waiting on the lock manager
    failures: int = 0  # polls in a row that could not reach the target
    backoff: float = 0.0  # seconds to the next look while failures > 0
    overrunning: bool = False  # the last poll overran its interval
    # Seconds from the last poll's due time to the next's, as planned while
    # the target answered (None: it did not, or no poll was planned yet).
    spacing: float | None = None
    jitter: Callable[[], float] = random.random  # in [0, 1)

    def skip(self, reason: str, slots: int) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + slots

    @property
    def current(self) -> float:
        """Seconds between polls now."""
        return self.backoff if self.failures else self.interval * self.factor

    def reached(self, reached: bool) -> None:
        """Whether the poll reached the target; one that did not lengthens the wait."""
        if reached:
            self.failures, self.backoff = 0, 0.0
            return
        self.failures += 1
        longest = max(self.interval, BACKOFF_CAP)
        wait = min(longest, self.interval * 2.0 ** min(self.failures, 32))
        self.backoff = max(self.interval, wait * (1.0 - JITTER * self.jitter()))

    def planned(self) -> float:
        """Seconds to the next poll; the slots of the interval it leaves out
        (slowed while contended, or backing off) are counted."""
        current = self.current
        slots = round(current / self.interval) - 1
        if slots > 0:
            self.skip(UNREACHABLE if self.failures else CONTENDED_REASON, slots)
        return current

    def overran(self, slots: int) -> bool:
        """The poll just ended overran its interval by ``slots`` (0: on time);
        True for the first of a run of overruns, the one said in the log."""
        if slots:
            self.skip(OVERRAN, slots)
        first = slots > 0 and not self.overrunning
        self.overrunning = slots > 0
        return first

    def spaced(self, due: float, next_due: float) -> float:
        """``next_due``, planned after the poll due at ``due``; noted as the
        spacing unless the target could not be reached."""
        self.spacing = None if self.failures else next_due - due
        return next_due

    def observe(self, waits: int | None) -> str | None:
        """A poll saw ``waits`` sessions waiting on the lock manager (None:
        not known); what changed, said in words, or None."""
        if waits is None:
            return None
        self._recent.append(waits)
        self._calm = 0 if waits else self._calm + 1
        contended = [w for w in self._recent if w]
        if len(contended) >= CONTENDED and self.factor < SLOWEST:
            self.factor *= 2
            self._recent.clear()
            return (
                f"{max(contended)} session(s) waited on the lock manager (LWLock:LockManager) "
                f"at {len(contended)} of the last {WINDOW} polls: polling every "
                f"{self.current:g}s instead of {self.interval:g}s while it is contended"
            )
        if self._calm >= CALM and self.factor > 1:
            self.factor //= 2
            self._calm = 0
            self._recent.clear()
            return f"the lock manager is calm again: polling every {self.current:g}s"
        return None

"""Freed memory given back to the system after a large poll.

glibc's malloc keeps what a thread frees in that thread's arena for reuse,
and a poll of many locks frees most of what it builds (the rows read, the
arrays decoded, the copies a judgement makes): watching 200,000 locks past
their budget the daemon grew to 414 MB, a third of it free memory kept.
``malloc_trim(0)`` gives the free pages of every arena back (50,000 locks:
200 MB -> 141 MB). Without glibc (musl, macOS) there is nothing to call and
nothing is done.
"""

from __future__ import annotations

import ctypes
import math
import threading
import time
from collections.abc import Callable

__all__ = ["TRIM_EVERY", "TRIM_FROM_LOCKS", "MemoryTrimmer", "give_back"]

# A poll that read at least this many locks left enough garbage to be worth
# giving back (a trim walks the whole heap).
TRIM_FROM_LOCKS = 10_000
# Seconds between two trims at least, process-wide: many large targets
# share one heap, and one trim frees what all of them left.
TRIM_EVERY = 1.0


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, called without the interpreter's lock held; None
    where the C library has none."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


class MemoryTrimmer:
    """Gives freed memory back after large polls, at most every ``every`` seconds."""

    def __init__(
        self,
        trim: Callable[[int], int] | None,
        every: float = TRIM_EVERY,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._trim = trim
        self.every = every
        self._monotonic = monotonic
        self._last = -math.inf
        self._lock = threading.Lock()
        self.trims = 0

    def after_poll(self, locks_read: int) -> bool:
        """After a poll that read ``locks_read`` locks: True when it gave
        memory back (a large poll, no trim within ``every``, a C library that can)."""
        if self._trim is None or locks_read < TRIM_FROM_LOCKS:
            return False
        with self._lock:
            now = self._monotonic()
            if now - self._last < self.every:
                return False
            self._last = now
            self.trims += 1
        self._trim(0)
        return True


_TRIMMER = MemoryTrimmer(_malloc_trim())


def give_back(locks_read: int) -> bool:
    """The process's trimmer, after a poll that read ``locks_read`` locks."""
    return _TRIMMER.after_poll(locks_read)

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
import gc
import math
import threading
import time
from collections.abc import Callable

__all__ = [
    "GC_THRESHOLDS",
    "TRIM_EVERY",
    "TRIM_FROM_LOCKS",
    "MemoryTrimmer",
    "collect_less_often",
    "give_back",
]

# The cyclic collector's thresholds (youngest generation, then collections
# before the next older one is): a poll that changed one lock of 50,000 makes
# some 150,000 objects (the new answer's rows, the documents' lock table) that
# live until the next change, and under Python's (700, 10, 10) the collector
# walked them over and over, a third of such a poll's CPU (docs/benchmarks.md).
# lockwatch makes few reference cycles; the garbage they leave waits longer.
# Starting up makes no garbage worth collecting either: the modules' classes and
# functions live as long as the process, and under Python's thresholds the
# collector walked them some 140 times while lockwatch run imported them (a
# tenth of the imports' CPU), so ``python -m lockwatch`` collects less often
# from its first line (lockwatch/__main__.py).
GC_THRESHOLDS = (50_000, 20, 100)

# A poll that read at least this many locks left enough garbage to be worth
# giving back (a trim walks the whole heap).
TRIM_FROM_LOCKS = 10_000
# Seconds between two trims at least, process-wide: many large targets
# share one heap, and one trim frees what all of them left.
TRIM_EVERY = 1.0


def collect_less_often() -> None:
    gc.set_threshold(*GC_THRESHOLDS)


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

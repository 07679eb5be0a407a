"""What a worker group's CPU readings say over a window: the cores it used,
the cores' worth of time it waited on a run queue for a CPU, and from the two
whether workers that use (almost) no CPU are starved (they want a CPU and do
not get it) or waiting on something else (a lock, I/O, a sleep). Pure."""

from __future__ import annotations

from collections.abc import Sequence

from lockwatch.model.evidence import STARVED, WAITING
from lockwatch.model.queues import WorkerSample


def per_second(samples: Sequence[WorkerSample], counter: str) -> float | None:
    """A counter's average growth per second between the first and last sample."""
    if len(samples) < 2:
        return None
    first, last = getattr(samples[0], counter), getattr(samples[-1], counter)
    seconds = (samples[-1].at - samples[0].at).total_seconds()
    if first is None or last is None or seconds <= 0:
        return None
    return float(max(0.0, last - first) / seconds)


def cpu_cores(samples: Sequence[WorkerSample]) -> float | None:
    """Average cores used between the first and last sample."""
    return per_second(samples, "cpu_seconds")


def cpu_wait_cores(samples: Sequence[WorkerSample]) -> float | None:
    """Average cores' worth of time runnable and waiting for a CPU; None
    unless both ends of the window were read."""
    return per_second(samples, "cpu_wait_seconds")


def cpu_state(cores: float | None, waited: float | None, stall_cpu: float) -> str | None:
    """STARVED when workers used less than ``stall_cpu`` cores but wanted at
    least that much (used + waited on a run queue), WAITING when they used
    little and did not wait for a CPU either; None when it cannot be told, or
    they used CPU enough.

    >>> cpu_state(0.03, 0.9, 0.1), cpu_state(0.03, 0.0, 0.1), cpu_state(0.5, 0.0, 0.1)
    ('starved', 'waiting', None)
    """
    if cores is None or waited is None or cores >= stall_cpu:
        return None
    return STARVED if cores + waited >= stall_cpu else WAITING

"""Whether worker processes wait for the CPU or for something else, from /proc.

A worker that burns no CPU either waits (sleeps on a lock, a socket, the
disk: not runnable) or wants the CPU and does not get it (runnable, on a run
queue behind other work). Only the first is a stalled worker; the second is a
starved one, on a host or cgroup short of CPU. The kernel tells them apart:

- ``/proc/PID/schedstat``: time on the CPU, time waiting on a run queue (both
  in nanoseconds), timeslices; the second grows only while runnable;
- ``/proc/PID/stat``: the state now (``R`` runnable, ``S``/``D`` waiting);
- ``/proc/pressure/cpu`` (PSI): the host's time in which some runnable task
  waited for a CPU, in microseconds.

The root is injected, so tests read a /proc tree of their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class ProcessSched:
    """One process as the scheduler sees it."""

    runqueue_seconds: float  # waited on a run queue since it started
    runnable: bool  # in state R (running or ready to) at the reading


def pressure_total(text: str) -> float | None:
    """The ``some`` total of a PSI file (``cpu.pressure`` or
    ``/proc/pressure/cpu``), in seconds; None when it has none.

    >>> pressure_total("some avg10=1.00 avg60=0.50 avg300=0.10 total=2500000\\n")
    2.5
    >>> pressure_total("full avg10=0.00 total=0") is None
    True
    """
    for line in text.splitlines():
        kind, *fields = line.split()
        if kind != "some":
            continue
        for field in fields:
            name, _, value = field.partition("=")
            if name == "total" and value.isdigit():
                return int(value) / 1e6
    return None


def _state(stat: str) -> str | None:
    """The state letter of a ``/proc/PID/stat`` line; its command name may hold
    spaces and parentheses, so the fields are read after the last ``)``.

    >>> _state("42 (a (b) c) R 1 42"), _state("garbage")
    ('R', None)
    """
    _, paren, rest = stat.rpartition(")")
    fields = rest.split()
    return fields[0] if paren and fields else None


class ProcReader:
    """Reads the scheduler's view of processes (and of the host) under a /proc root."""

    def __init__(self, root: Path = PROC) -> None:
        self.root = root

    def process(self, pid: int) -> ProcessSched | None:
        """None when the process is gone, or the kernel keeps no schedstat."""
        directory = self.root / str(pid)
        try:
            sched = (directory / "schedstat").read_text(encoding="ascii").split()
            state = _state((directory / "stat").read_text(encoding="ascii", errors="replace"))
        except (OSError, UnicodeDecodeError):
            return None
        if len(sched) < 2 or not sched[1].isdigit():
            return None
        return ProcessSched(int(sched[1]) / 1e9, state == "R")

    def host_pressure(self) -> float | None:
        """The host's CPU pressure counter (PSI ``some`` total), in seconds;
        None without PSI (a kernel before 4.20, or booted with psi=0)."""
        try:
            return pressure_total((self.root / "pressure" / "cpu").read_text(encoding="ascii"))
        except (OSError, UnicodeDecodeError):
            return None

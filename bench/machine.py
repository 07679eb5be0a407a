"""How busy the machine was while something was measured, and how much of that
was someone else: the load average, and the CPU of every process that is not
the benchmark's (this process and its children, the server's processes)."""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass

import psutil

BUSY = ("user", "nice", "system", "irq", "softirq", "steal")


@dataclass(frozen=True, slots=True)
class Load:
    """The machine over one window."""

    load1: float  # the one-minute load average as the window ended
    others_percent: float  # other processes' CPU, in % of the machine's cores


@dataclass(frozen=True, slots=True)
class _Reading:
    at: float
    busy: float  # CPU seconds the whole machine spent not idle
    ours: float  # of which the benchmark's processes


def _process_seconds(process: psutil.Process, reaped: bool) -> float:
    """A process's CPU seconds, and with ``reaped`` its reaped children's."""
    try:
        times = process.cpu_times()
    except psutil.Error:  # it ended between the listing and now
        return 0.0
    spent = times.user + times.system
    if reaped:
        spent += times.children_user + times.children_system
    return float(spent)


def _tree_seconds(root: psutil.Process) -> float:
    """CPU seconds of a process, its live descendants, and its children that
    ended (a child that ends between two readings moves from the one to the
    other, so the difference of two readings counts it once)."""
    try:
        children = root.children(recursive=True)
    except psutil.Error:
        return 0.0
    return _process_seconds(root, True) + sum(_process_seconds(c, False) for c in children)


class Machine:
    """Readings of the machine's CPU, ours (this process and its children:
    the monitors, pgbench) told apart from the rest; ``server`` is the
    postmaster whose processes are ours too."""

    def __init__(self, server: int | None) -> None:
        self._self = psutil.Process()
        self._server = None if server is None else psutil.Process(server)
        self._cores = os.cpu_count() or 1

    def _reading(self) -> _Reading:
        times = psutil.cpu_times()
        # guest time is already inside user and nice on Linux.
        busy = sum(getattr(times, part, 0.0) for part in BUSY)
        ours = _tree_seconds(self._self)
        if self._server is not None:
            ours += _tree_seconds(self._server)
        return _Reading(time.monotonic(), busy, ours)

    def start(self) -> _Reading:
        return self._reading()

    def since(self, start: _Reading) -> Load:
        end = self._reading()
        elapsed = max(end.at - start.at, 1e-9)
        others = (end.busy - start.busy) - (end.ours - start.ours)
        return Load(
            load1=os.getloadavg()[0],
            others_percent=max(others, 0.0) / elapsed / self._cores * 100,
        )


def describe() -> str:
    """The machine in a few words, for a measurement's heading."""
    return f"{os.cpu_count()} CPUs, Python {platform.python_version()}, {platform.system()}"

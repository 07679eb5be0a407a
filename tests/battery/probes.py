"""What the battery reads off a running lockwatch: its metrics as numbers, its
footprint (threads, file descriptors, memory) and its sessions on a server."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import psycopg
import requests
from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True, slots=True)
class Scrape:
    """One /metrics answer."""

    text: str
    samples: tuple[tuple[str, dict[str, str], float], ...]

    @classmethod
    def parse(cls, text: str) -> Scrape:
        samples = tuple(
            (sample.name, dict(sample.labels), float(sample.value))
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        )
        return cls(text, samples)

    def get(self, name: str, **labels: str) -> float | None:
        for sample, their, value in self.samples:
            if sample == name and all(their.get(k) == v for k, v in labels.items()):
                return value
        return None

    def count(self, prefix: str) -> int:
        """Series whose name starts with ``prefix``."""
        return sum(1 for name, _, _ in self.samples if name.startswith(prefix))


def scrape(base: str, **kwargs: Any) -> Scrape:
    response = requests.get(f"{base}/metrics", timeout=10, **kwargs)
    response.raise_for_status()
    return Scrape.parse(response.text)


@dataclass(frozen=True, slots=True)
class Footprint:
    threads: int
    fds: int
    rss_mb: float

    def __str__(self) -> str:
        return f"{self.threads} threads, {self.fds} fds, {self.rss_mb:.0f} MB"


def footprint(pid: int) -> Footprint:
    process = psutil.Process(pid)
    return Footprint(process.num_threads(), process.num_fds(), process.memory_info().rss / 2**20)


def settled_footprint(pid: int, ceiling: Footprint, timeout: float = 10) -> Footprint:
    """The footprint once threads and fds are back within ``ceiling`` (an HTTP
    request's thread takes a moment to end), or as it is when time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        now = footprint(pid)
        if (now.threads <= ceiling.threads and now.fds <= ceiling.fds) or (
            time.monotonic() > deadline
        ):
            return now
        time.sleep(0.1)


def lockwatch_sessions(admin_dsn: str, database: str | None = None) -> int:
    """lockwatch's sessions on a server (in one database, if given)."""
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'lockwatch'"
            " AND (%(db)s::text IS NULL OR datname = %(db)s)",
            {"db": database},
        ).fetchone()
    return int(row[0]) if row else -1


@dataclass(frozen=True, slots=True)
class Observation:
    at: float  # monotonic
    metrics: Scrape
    footprint: Footprint


class Observer:
    """Scrapes a lockwatch process and reads its footprint every ``every``
    seconds from a thread of its own, for as long as the ``with`` lasts."""

    def __init__(self, base: str, pid: int, every: float = 0.25, **request: Any) -> None:
        self.base = base
        self.pid = pid
        self.every = every
        self.request = request
        self.seen: list[Observation] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="observer", daemon=True)

    def __enter__(self) -> Observer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                metrics = scrape(self.base, **self.request)
                self.seen.append(Observation(time.monotonic(), metrics, footprint(self.pid)))
            except (requests.RequestException, psutil.Error) as exc:
                self.errors.append(str(exc))
            self._stop.wait(self.every)

    def missed_polls(self, target: str, interval: float) -> tuple[int, int]:
        """(slots missed, slots) of ``target``'s schedule over the observation."""
        first, last = self.seen[0], self.seen[-1]
        polls = (last.metrics.get("lockwatch_polls_total", target=target) or 0) - (
            first.metrics.get("lockwatch_polls_total", target=target) or 0
        )
        slots = math.floor((last.at - first.at) / interval)
        return max(0, slots - int(polls)), slots

    def poll_stamps(self, target: str) -> list[float]:
        """The successive poll times of ``target`` the scrapes saw, each once."""
        stamps: list[float] = []
        for observation in self.seen:
            stamp = observation.metrics.get(
                "lockwatch_last_successful_poll_timestamp_seconds", target=target
            )
            if stamp is not None and (not stamps or stamps[-1] != stamp):
                stamps.append(stamp)
        return stamps

    def rss_curve(self, points: int = 8) -> list[float]:
        """RSS in MB at ``points`` evenly spaced observations."""
        step = max(1, (len(self.seen) - 1) // max(1, points - 1))
        return [o.footprint.rss_mb for o in self.seen[::step]][:points]


# The probe's loop: sleep a short step, write when it woke and how much longer
# than asked it slept. A process of its own: what it sees is the scheduler's,
# not a GIL's.
_WAKE_LOOP = """
import sys, time
step = float(sys.argv[1])
while True:
    asked = time.monotonic()
    time.sleep(step)
    woke = time.monotonic()
    print(f"{woke:.6f} {woke - asked - step:.6f}", flush=True)
"""


class WakeProbe:
    """The machine's own delay in waking a sleeping process, over a stretch of
    a test: another process sleeps in short steps and says how late each
    wake-up came. A daemon's lateness beyond what the sleeper lost over the
    same stretch is its own; up to it, the host kept every sleeper waiting
    alike (CPU burners, other test workers, the host stalling). Use as a
    context manager; ``worst`` and ``lost_within`` after it closes."""

    def __init__(self, step: float = 0.02) -> None:
        self.step = step
        self.delays: list[float] = []
        self.woke: list[float] = []  # time.monotonic() at each wake-up, as delays
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> WakeProbe:
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _WAKE_LOOP, str(self.step)],
            stdout=subprocess.PIPE,
            text=True,
        )
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._proc is not None
        self._proc.terminate()
        out, _ = self._proc.communicate(timeout=30)
        readings = [line.split() for line in out.splitlines() if line]
        self.woke = [float(woke) for woke, _ in readings]
        self.delays = [float(delay) for _, delay in readings]

    @property
    def worst(self) -> float:
        return max(self.delays, default=0.0)

    def lost_within(self, window: float) -> float:
        """The most waking time the sleeper lost in all within any ``window``
        seconds: the host withheld about that much from a process that was
        ready to run. A poller's work before a poll can meet several such
        delays in a row (on a quiet run one poll came 720 ms late while the
        worst single wake-up was 475 ms), which ``worst`` alone misses.

        >>> probe = WakeProbe()
        >>> probe.woke, probe.delays = [1.0, 1.5, 2.2, 5.0], [0.2, 0.3, 0.1, 0.4]
        >>> round(probe.lost_within(1.0), 3), round(probe.lost_within(10.0), 3)
        (0.5, 1.0)
        """
        most = lost = 0.0
        first = 0
        for last, woke in enumerate(self.woke):
            lost += self.delays[last]
            while self.woke[first] < woke - window:
                lost -= self.delays[first]
                first += 1
            most = max(most, lost)
        return most


def lateness(stamps: list[float], interval: float) -> tuple[list[float], int]:
    """How late each poll of a target came against its own grid, and how many
    of its slots passed without a poll; ``stamps`` are the target's successive
    ``lockwatch_last_successful_poll_timestamp_seconds``.

    The grid is the phase that makes the polls least late in all (a poll is
    never early); each poll belongs to the last slot at or before it. Slots
    rounded from the first poll instead would count polls that wobble around
    half an interval from it as two in one slot and one missed.

    Polls wobbling around half an interval from the first: the first poll's
    slot and the next are 1.49 s apart (one slot without a poll); rounded from
    the first poll they would be counted as two missed.

    >>> late, missed = lateness([0.0, 1.49, 2.51, 3.49, 4.51, 5.49], 1.0)
    >>> missed, [round(x, 2) for x in late]
    (1, [0.51, 0.0, 0.02, 0.0, 0.02, 0.0])
    >>> lateness([0.0, 1.0, 3.0, 4.0], 1.0)[1]
    1
    """
    first = stamps[0]
    phases = sorted({(t - first) % interval for t in stamps})

    def late_from(phase: float) -> list[float]:
        # The tiny epsilon keeps a poll on its slot's edge in that slot.
        return [(t - first - phase + 1e-9) % interval - 1e-9 for t in stamps]

    anchor = min(phases, key=lambda phase: sum(late_from(phase)))
    late = late_from(anchor)
    slots = [round((t - first - anchor - x) / interval) for t, x in zip(stamps, late, strict=True)]
    missed = slots[-1] - slots[0] + 1 - len(set(slots))
    return [max(0.0, x) for x in late], missed


def saved_keys(state_file: Path) -> list[str]:
    """The lock keys whose hold times a target's state file keeps (none while
    it does not exist)."""
    if not state_file.exists():
        return []
    held = json.loads(state_file.read_text())["holds"]["held"]
    return [str(key) for entry in held for key in entry["keys"]]

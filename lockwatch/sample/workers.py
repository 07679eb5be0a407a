"""What a worker group is doing: the CPU its processes use (local processes,
a cgroup v2, or a Prometheus query) and its database sessions.

Each CPU source turns what it reads into one counter of CPU seconds per
group that never goes down: processes come and go and cgroups are recreated
when a unit restarts, so only what grew since the last reading is added.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from collections.abc import Iterable, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lockwatch.model.locks import Backend
from lockwatch.model.queues import WorkerSample
from lockwatch.sample.activity import QUERY_CHARS, backend_from_row
from lockwatch.sample.base import SampleContext, SampleError
from lockwatch.sample.cpu import PROC, ProcReader, pressure_total
from lockwatch.settings.queues import CgroupCpu, ProcessMatch, PrometheusCpu
from lockwatch.util.deadline import within
from lockwatch.util.secrets import redact

if TYPE_CHECKING:
    import psutil
    import requests

MAX_SESSIONS = 2000  # sessions read per poll, whatever the patterns match


class CounterAccumulator:
    """A counter that survives the resets of the value it follows.

    >>> c = CounterAccumulator()
    >>> [c.add(v) for v in (5.0, 7.0, 2.0, 3.0)]
    [5.0, 7.0, 9.0, 10.0]
    """

    def __init__(self) -> None:
        self.total = 0.0
        self._last: float | None = None

    def add(self, value: float) -> float:
        if self._last is None or value < self._last:
            # first reading, or the value restarted from 0 (a restarted unit)
            self.total += value
        else:
            self.total += value - self._last
        self._last = value
        return self.total


class ProcessCpuSampler:
    """Local processes matched by command line or pidfile, with their children
    (psutil, imported by the methods that read them: only this sampler needs it)."""

    def __init__(
        self, match: ProcessMatch, *, exclude: int | None = None, proc: Path = PROC
    ) -> None:
        self.match = match
        self._pattern = re.compile(match.cmdline) if match.cmdline else None
        self._exclude = os.getpid() if exclude is None else exclude
        # per process (pid, start): CPU seconds and run-queue seconds as last read
        self._seen: dict[tuple[int, float], tuple[float, float]] = {}
        self._total = 0.0
        self._waited = 0.0  # run-queue seconds, a counter like _total
        self._sched = ProcReader(proc)

    def _roots(self) -> list[psutil.Process]:
        import psutil

        roots: list[psutil.Process] = []
        if self.match.pidfile is not None:
            pid = self._pid_from_file(self.match.pidfile)
            if pid is not None:
                # a stale pidfile: the service is not running
                with contextlib.suppress(psutil.NoSuchProcess):
                    roots.append(psutil.Process(pid))
        if self._pattern is not None:
            for proc in psutil.process_iter(["cmdline"]):
                cmdline = proc.info.get("cmdline") or []
                if proc.pid != self._exclude and self._pattern.search(" ".join(cmdline)):
                    roots.append(proc)
        return roots

    @staticmethod
    def _pid_from_file(path: Path) -> int | None:
        try:
            text = path.read_text(encoding="ascii").strip()
        except FileNotFoundError:
            return None  # not running
        except (OSError, UnicodeDecodeError) as exc:
            raise SampleError(f"cannot read pidfile {path}: {exc}") from None
        if not text.isdigit():
            raise SampleError(f"pidfile {path} does not hold a pid")
        return int(text)

    def _processes(self) -> Iterable[psutil.Process]:
        import psutil

        found: dict[int, psutil.Process] = {}
        for root in self._roots():
            found.setdefault(root.pid, root)
            if self.match.children:
                try:
                    for child in root.children(recursive=True):
                        found.setdefault(child.pid, child)
                except psutil.Error:
                    continue
        found.pop(self._exclude, None)
        return found.values()

    def sample(self, context: SampleContext) -> WorkerSample:
        import psutil

        current: dict[tuple[int, float], tuple[float, float]] = {}
        runnable, told = 0, True  # told: every process's run-queue time was read
        for proc in self._processes():
            try:
                with proc.oneshot():
                    identity = (proc.pid, proc.create_time())
                    times = proc.cpu_times()
            except psutil.Error:
                continue  # gone, or a zombie, since it was listed
            used = times.user + times.system
            sched = self._sched.process(proc.pid)
            told = told and sched is not None
            waited = 0.0 if sched is None else sched.runqueue_seconds
            runnable += bool(sched and sched.runnable)
            last_used, last_waited = self._seen.get(identity, (0.0, 0.0))
            current[identity] = (used, waited)
            self._total += max(0.0, used - last_used)
            self._waited += max(0.0, waited - last_waited)
        self._seen = current
        return WorkerSample(
            context.now,
            self._total,
            len(current),
            cpu_wait_seconds=self._waited if told else None,
            runnable=runnable if told else None,
            host_pressure_seconds=self._sched.host_pressure(),
        )

    def close(self) -> None:
        """Holds nothing open."""


class CgroupCpuSampler:
    """A cgroup v2 directory: ``cpu.stat``'s usage_usec and ``cgroup.procs``."""

    def __init__(self, spec: CgroupCpu) -> None:
        self.spec = spec
        self.directory = spec.root / spec.path
        self._usage = CounterAccumulator()
        self._waited = CounterAccumulator()  # cpu.pressure: time its tasks waited for a CPU

    def _pressure(self) -> float | None:
        """The cgroup's CPU pressure counter; None without PSI."""
        try:
            text = (self.directory / "cpu.pressure").read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError):
            return None
        total = pressure_total(text)
        return None if total is None else self._waited.add(total)

    def sample(self, context: SampleContext) -> WorkerSample:
        if not self.directory.is_dir():
            # a stopped unit has no cgroup: no processes, no CPU
            return WorkerSample(context.now, self._usage.total, 0, self._waited.total)
        try:
            stat = (self.directory / "cpu.stat").read_text(encoding="ascii")
            procs = (self.directory / "cgroup.procs").read_text(encoding="ascii")
        except FileNotFoundError:
            return WorkerSample(context.now, self._usage.total, 0)  # removed meanwhile
        except (OSError, UnicodeDecodeError) as exc:
            raise SampleError(f"cannot read cgroup {self.directory}: {exc}") from None
        fields = dict(line.split(None, 1) for line in stat.splitlines() if " " in line)
        usage = fields.get("usage_usec", "").strip()
        if not usage.isdigit():
            raise SampleError(f"{self.directory / 'cpu.stat'} has no usage_usec (not cgroup v2?)")
        total = self._usage.add(int(usage) / 1e6)
        processes = sum(1 for line in procs.split() if line)
        return WorkerSample(context.now, total, processes, cpu_wait_seconds=self._pressure())

    def close(self) -> None:
        """Holds nothing open."""


class PrometheusCpuSampler:
    """An instant query to Prometheus, summed over the series it returns."""

    def __init__(self, spec: PrometheusCpu, session: requests.Session | None = None) -> None:
        self.spec = spec
        self.endpoint = spec.url.rstrip("/") + "/api/v1/query"
        from lockwatch.util.http_session import deadline_session  # requests: loaded here

        self._session = deadline_session() if session is None else session
        self._cpu = CounterAccumulator()
        self._secrets = (spec.url,)

    def _query(self, query: str) -> float:
        import requests

        # The timeout bounds the whole query too: an answer trickled in reads
        # that each come in time would hold the poll for minutes.
        with within(self.spec.timeout) as deadline:
            try:
                response = self._session.get(
                    self.endpoint, params={"query": query}, timeout=self.spec.timeout
                )
            except requests.RequestException as exc:
                if not deadline.expired:
                    raise SampleError(redact(f"prometheus: {exc}", self._secrets)) from None
        if deadline.expired:
            raise SampleError(f"prometheus: no whole answer within {self.spec.timeout:g}s")
        try:
            document = response.json()
        except ValueError:
            raise SampleError(
                f"prometheus answered HTTP {response.status_code} without JSON"
            ) from None
        if not isinstance(document, dict) or document.get("status") != "success":
            error = document.get("error") if isinstance(document, dict) else None
            raise SampleError(
                redact(f"prometheus: query failed: {error or response.status_code}", self._secrets)
            )
        return _sum_result(document.get("data"), query)

    def sample(self, context: SampleContext) -> WorkerSample:
        total = self._cpu.add(self._query(self.spec.cpu_query))
        processes = None
        if self.spec.processes_query is not None:
            processes = int(self._query(self.spec.processes_query))
        return WorkerSample(context.now, total, processes)

    def close(self) -> None:
        self._session.close()


def _sum_result(data: Any, query: str) -> float:
    """The sum of an instant query's vector (or its scalar).

    >>> _sum_result({"resultType": "vector", "result": [{"value": [1, "2.5"]}, {"value": [1, "1"]}]}, "q")
    3.5
    """
    if not isinstance(data, dict):
        raise SampleError("prometheus: no data in the answer")
    kind = data.get("resultType")
    result = data.get("result")
    try:
        if kind == "scalar" and isinstance(result, list):
            values = [float(result[1])]
        elif kind == "vector" and isinstance(result, list):
            values = [float(series["value"][1]) for series in result]
        else:
            raise SampleError(f"prometheus: {query!r} gave a {kind}, not an instant vector")
    except (KeyError, IndexError, TypeError, ValueError):
        raise SampleError(f"prometheus: cannot read the answer to {query!r}") from None
    if not values:
        raise SampleError(f"prometheus: {query!r} matched no series (is its exporter scraped?)")
    total = math.fsum(values)
    if not math.isfinite(total):
        raise SampleError(f"prometheus: {query!r} is not a finite number")
    return total


def like_pattern(glob: str) -> str:
    """An application_name pattern (``*`` and ``?``) as a LIKE pattern.

    >>> like_pattern("webhook_worker-*"), like_pattern("a?%")
    ('webhook\\\\_worker-%', 'a_\\\\%')
    """
    escaped = glob.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped.replace("*", "%").replace("?", "_")


@cache
def _sessions_query() -> str:
    return (resources.files("lockwatch.sample") / "sql" / "worker_sessions.sql").read_text(
        encoding="utf-8"
    )


class SessionSampler:
    """The client sessions of every worker group of a target, in one query."""

    def __init__(self, patterns: Sequence[str]) -> None:
        self.patterns = sorted(set(patterns))

    def sample(self, context: SampleContext) -> tuple[Backend, ...]:
        rows = context.database().query(
            _sessions_query(),
            {
                "patterns": [like_pattern(p) for p in self.patterns],
                "query_chars": QUERY_CHARS,
                "max_sessions": MAX_SESSIONS,
            },
        )
        return tuple(backend_from_row(row) for row in rows)

    def close(self) -> None:
        """The session belongs to the target's lock sampler."""

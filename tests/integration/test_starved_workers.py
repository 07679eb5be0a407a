"""Real workers beside a real CPU hog (issue 24, defect 10): a worker that
wants a CPU and does not get it (a spinner at nice 19 sharing one CPU with a
hog at nice 0) is starved, never stalled; a worker that sleeps beside the same
hog waits, and its queue, pending and not draining, is a stall. The readings
are lockwatch's own process sampler's, over real /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from lockwatch.detect.queue_locks import LockContext
from lockwatch.detect.queues import QueueInput, WorkerInput, covered, detect_queues, in_window
from lockwatch.model.evidence import STARVED, WAITING, QueueEvidence
from lockwatch.model.findings import FindingKind
from lockwatch.model.queues import QueueSample, WorkerSample
from lockwatch.sample.base import SampleContext
from lockwatch.sample.workers import ProcessCpuSampler
from lockwatch.settings.locks import LockSettings
from lockwatch.settings.queues import ProcessMatch, QueueThresholds, WorkerGroup
from tests.fixtures.evidence import evidence_as
from tests.fixtures.postgres import wait_until

pytestmark = pytest.mark.slow

WINDOW = 4.0  # seconds: short, for the hog costs a core while it runs
THRESHOLDS = QueueThresholds(window=WINDOW, min_growth=0.1, stall_cpu=0.1)
SPIN = "import sys\nwhile True:\n    pass\n"
SLEEP = "import time\ntime.sleep(600)\n"


def start(code: str, marker: str, cpu: int, nice: int) -> subprocess.Popen[bytes]:
    """A Python process running ``code``, pinned to ``cpu`` at ``nice``."""
    pinned = ["nice", "-n", str(nice), "taskset", "-c", str(cpu)]
    return subprocess.Popen([*pinned, sys.executable, "-c", code, marker], stdin=subprocess.DEVNULL)


@pytest.fixture
def processes() -> Iterator[None]:
    cpu = min(os.sched_getaffinity(0))
    started = [
        start(SPIN, "lw-cpu-hog", cpu, 0),
        start(SPIN, "lw-starved-worker", cpu, 19),
        start(SLEEP, "lw-idle-worker", cpu, 0),
        start(SLEEP, "lw-idle-worker", cpu, 0),
    ]
    yield
    for proc in started:
        proc.kill()
        proc.wait(timeout=10)


def judged(name: str, readings: list[WorkerSample]) -> dict[FindingKind, QueueEvidence]:
    """A queue with work pending all through the readings, growing slowly,
    served by the group ``name`` whose CPU the readings are."""
    start_at = readings[0].at
    samples = tuple(
        QueueSample(at=r.at, depth=40 + round((r.at - start_at).total_seconds())) for r in readings
    )
    group = WorkerGroup(name, ("jobs",), ProcessMatch(cmdline=name))
    queue = QueueInput("jobs", THRESHOLDS, samples, (WorkerInput(group, tuple(readings)),))
    now = readings[-1].at
    found = detect_queues("main", [queue], LockContext(None, LockSettings()), now).findings
    return {f.kind: evidence_as(f, QueueEvidence) for f in found}


def test_a_starved_worker_is_told_from_one_that_waits_and_never_called_stalled(
    processes: None,
) -> None:
    samplers = {
        name: ProcessCpuSampler(ProcessMatch(cmdline=name))
        for name in ("lw-starved-worker", "lw-idle-worker")
    }
    readings: dict[str, list[WorkerSample]] = {name: [] for name in samplers}

    def window_covered() -> bool:
        """Readings spanning the window as the detector counts it, however
        slowly a loaded machine takes them."""
        now = datetime.now(UTC)
        for name, sampler in samplers.items():
            readings[name].append(sampler.sample(SampleContext(now, None)))
        time.sleep(0.3)
        return all(covered(in_window(r, r[-1].at, WINDOW), WINDOW) for r in readings.values())

    wait_until(window_covered, timeout=120, interval=0, message="a window of readings")

    starved = readings["lw-starved-worker"]
    assert starved[-1].processes == 1 and starved[-1].cpu_wait_seconds is not None
    span = (starved[-1].at - starved[0].at) / timedelta(seconds=1)
    used = (starved[-1].cpu_seconds - starved[0].cpu_seconds) / span
    assert used < THRESHOLDS.stall_cpu, f"the nice 19 spinner got {used:.2f} cores beside the hog"

    found = judged("lw-starved-worker", starved)
    assert FindingKind.QUEUE_STALLED not in found, found
    (facts,) = found[FindingKind.QUEUE_GROWING].workers
    assert facts.cpu_state == STARVED, facts
    assert facts.cpu_wait_cores is not None and facts.cpu_wait_cores >= THRESHOLDS.stall_cpu

    idle = judged("lw-idle-worker", readings["lw-idle-worker"])
    stalled = idle[FindingKind.QUEUE_STALLED]
    (facts,) = stalled.workers
    assert (facts.processes, facts.cpu_state, facts.runnable) == (2, WAITING, 0)
    assert stalled.worker_cpu_state == WAITING

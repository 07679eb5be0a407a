"""Grows-without-CPU tells a worker that waits from one that is starved
(issue 24, defect 10): on a loaded host, workers that were runnable but got no
CPU were called stalled. The run-queue time of their processes says which; a
starved worker is never a stall."""

from __future__ import annotations

import doctest

from lockwatch.detect import worker_cpu
from lockwatch.detect.queues import QueueInput, WorkerInput, detect_queues
from lockwatch.model.evidence import STARVED, WAITING, QueueEvidence
from lockwatch.model.findings import FindingKind
from lockwatch.model.queues import WorkerSample
from lockwatch.settings.queues import ProcessMatch, WorkerGroup
from tests.fixtures.evidence import evidence_as
from tests.fixtures.snapshots import NOW, TARGET, ago
from tests.unit.detect.test_queues import NO_LOCKS, STEP, THRESHOLDS, WINDOW, series

GROUP = WorkerGroup("webhook-workers", ("webhooks",), ProcessMatch(cmdline="worker"))


def readings(cores: float, waited: float | None, runnable: int = 0) -> WorkerInput:
    """Readings every STEP over the window: ``cores`` used, ``waited`` cores'
    worth of time on a run queue (None: the source cannot tell)."""
    count = int(WINDOW / STEP) + 1
    return WorkerInput(
        GROUP,
        tuple(
            WorkerSample(
                ago(WINDOW - i * STEP),
                100.0 + cores * i * STEP,
                6,
                cpu_wait_seconds=None if waited is None else 50.0 + waited * i * STEP,
                runnable=runnable,
                host_pressure_seconds=1000.0 + 0.9 * i * STEP,
            )
            for i in range(count)
        ),
    )


def judged(worker: WorkerInput, depth_growth: float = 0.0) -> dict[FindingKind, QueueEvidence]:
    samples = series(lambda t: 40 + depth_growth * t)
    queue = QueueInput("webhooks", THRESHOLDS, samples, (worker,))
    found = detect_queues(TARGET, [queue], NO_LOCKS, NOW).findings
    return {f.kind: evidence_as(f, QueueEvidence) for f in found}


def test_the_doctests_hold() -> None:
    assert doctest.testmod(worker_cpu).failed == 0


def test_workers_runnable_on_a_busy_host_are_starved_never_stalled() -> None:
    """The issue's case: 3.2% of a core used, the rest of their time on a run queue."""
    found = judged(readings(0.032, 1.8, runnable=6), depth_growth=0.5)
    assert FindingKind.QUEUE_STALLED not in found
    growing = found[FindingKind.QUEUE_GROWING]
    assert growing.worker_cpu_state == STARVED
    (facts,) = growing.workers
    assert (facts.cpu_state, facts.cpu_wait_cores, facts.runnable) == (STARVED, 1.8, 6)
    assert facts.host_cpu_pressure == 0.9


def test_a_starved_queue_that_does_not_grow_gives_no_finding() -> None:
    assert judged(readings(0.032, 1.8)) == {}


def test_workers_that_wait_on_something_else_still_stall_and_say_so() -> None:
    found = judged(readings(0.02, 0.001))
    stalled = found[FindingKind.QUEUE_STALLED]
    assert stalled.worker_cpu_state == WAITING
    assert stalled.workers[0].cpu_state == WAITING


def test_the_stall_summary_says_the_workers_did_not_wait_for_a_cpu() -> None:
    samples = series(lambda t: 40)
    queue = QueueInput("webhooks", THRESHOLDS, samples, (readings(0.02, 0.001),))
    (stall,) = detect_queues(TARGET, [queue], NO_LOCKS, NOW).findings
    assert stall.summary.endswith(
        "its workers used 2.0% of a core over 1m, waiting (not for a CPU: 0.1% of a core "
        "on a run queue)"
    )


def test_without_run_queue_readings_low_cpu_is_a_stall_as_before() -> None:
    found = judged(readings(0.02, None))
    assert found[FindingKind.QUEUE_STALLED].worker_cpu_state is None


def test_a_starved_group_that_completed_nothing_is_still_not_a_stall() -> None:
    completed = series(lambda t: 40, completed=lambda t: 7)
    queue = QueueInput("webhooks", THRESHOLDS, completed, (readings(0.01, 1.0),))
    assert detect_queues(TARGET, [queue], NO_LOCKS, NOW).findings == ()

"""The queue detectors on synthetic series: growth by least squares, stalls by
completions or CPU, and the chain from a stalled queue to the lock its
workers wait on."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from lockwatch.detect.incidents import tell_incidents
from lockwatch.detect.lock_waits import detect_lock_waits
from lockwatch.detect.locks import detect_locks
from lockwatch.detect.queue_locks import LockContext
from lockwatch.detect.queues import QueueInput, WorkerInput, completed_in, detect_queues, fit_line
from lockwatch.model.evidence import QueueEvidence, QueueLockChain, QueueStallEvidence
from lockwatch.model.evidence.json_form import to_json
from lockwatch.model.findings import Finding, FindingKind, Related, Subject
from lockwatch.model.incidents import RootKind
from lockwatch.model.lock_waits import LockRowFact, lock_waits
from lockwatch.model.locks import Backend
from lockwatch.model.queues import QueueSample, WorkerSample
from lockwatch.settings.locks import LockSettings, NamedLock
from lockwatch.settings.queues import ProcessMatch, QueueThresholds, WorkerGroup
from tests.fixtures.evidence import evidence_as
from tests.fixtures.snapshots import DB, NOW, TARGET, ago, backend, held, key, snapshot, waiting

WINDOW = 60.0
STEP = 2.0
THRESHOLDS = QueueThresholds(window=WINDOW, min_growth=0.1, stall_cpu=0.1)
GROWING = FindingKind.QUEUE_GROWING
STALLED = FindingKind.QUEUE_STALLED
SUBJECT = Subject(queue="webhooks")
NO_LOCKS = LockContext(None, LockSettings())


def series(
    depth: Callable[[float], float],
    *,
    completed: Callable[[float], int] | None = None,
    seconds: float = WINDOW,
) -> tuple[QueueSample, ...]:
    """Samples every STEP seconds up to NOW; ``depth(t)`` with t seconds from the first."""
    count = int(seconds / STEP) + 1
    return tuple(
        QueueSample(
            at=ago(seconds - i * STEP),
            depth=max(0, round(depth(i * STEP))),
            completed_total=None if completed is None else completed(i * STEP),
        )
        for i in range(count)
    )


def cpu(cores: float, *, seconds: float = WINDOW) -> tuple[WorkerSample, ...]:
    count = int(seconds / STEP) + 1
    return tuple(
        WorkerSample(ago(seconds - i * STEP), 100.0 + cores * i * STEP, 6) for i in range(count)
    )


def workers(
    cores: float | None = None, sessions: Sequence[Backend] | None = None
) -> tuple[WorkerInput, ...]:
    group = WorkerGroup(
        "webhook-workers",
        ("webhooks",),
        ProcessMatch(cmdline="worker") if cores is not None else None,
        ("webhook-worker-*",) if sessions is not None else (),
    )
    return (
        WorkerInput(
            group,
            cpu(cores) if cores is not None else (),
            None if sessions is None else tuple(sessions),
        ),
    )


def judge(
    samples: tuple[QueueSample, ...],
    workers: tuple[WorkerInput, ...] = (),
    locks: LockContext = NO_LOCKS,
    thresholds: QueueThresholds = THRESHOLDS,
) -> tuple[list[Finding], frozenset[tuple[FindingKind, Subject]]]:
    verdicts = detect_queues(
        TARGET, [QueueInput("webhooks", thresholds, samples, workers)], locks, NOW
    )
    return list(verdicts.findings), verdicts.undecided


def kinds(findings: list[Finding]) -> set[FindingKind]:
    return {f.kind for f in findings}


def only(findings: list[Finding], kind: FindingKind) -> Finding:
    (found,) = [f for f in findings if f.kind is kind]
    return found


def test_a_least_squares_line_recovers_a_known_slope() -> None:
    fit = fit_line([(t, 3 + 0.5 * t) for t in range(10)])

    assert fit is not None
    assert math.isclose(fit.slope, 0.5)
    assert math.isclose(fit.r2, 1.0)


def test_a_queue_that_grows_by_a_steady_half_item_a_second_is_growing() -> None:
    findings, undecided = judge(series(lambda t: 20 + 0.5 * t))

    growing = only(findings, GROWING)
    assert growing.subject == SUBJECT
    assert math.isclose(evidence_as(growing, QueueEvidence).growth_per_second, 0.5, abs_tol=0.02)
    assert evidence_as(growing, QueueEvidence).depth == 50
    assert "+0.5/s from 20 to 50" in growing.summary
    assert growing.since == ago(WINDOW)
    assert not undecided


def test_growth_below_the_minimum_rate_is_not_reported() -> None:
    findings, _ = judge(series(lambda t: 20 + 0.05 * t))

    assert findings == []


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    level=st.integers(5, 500),
    noise=st.integers(1, 20),
)
def test_a_noisy_but_flat_queue_is_never_growing(seed: int, level: int, noise: int) -> None:
    rng = random.Random(seed)

    findings, _ = judge(series(lambda t: level + rng.randint(-noise, noise)))

    assert GROWING not in kinds(findings)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    rate=st.floats(0.5, 5.0),
    noise=st.integers(0, 5),
)
def test_steady_growth_is_found_through_noise(seed: int, rate: float, noise: int) -> None:
    rng = random.Random(seed)

    findings, _ = judge(series(lambda t: 10 + rate * t + rng.randint(-noise, noise)))

    assert GROWING in kinds(findings)


def test_a_burst_that_drains_within_the_window_is_neither_growing_nor_stalled() -> None:
    def burst(t: float) -> float:
        if t < 10:
            return 5
        if t < 14:
            return 5 + (t - 10) * 100  # 400 items arrive at once
        return max(5.0, 405 - (t - 14) * 40)  # and the workers clear them

    findings, _ = judge(series(burst, completed=lambda t: int(t * 10)), workers(cores=0.9))

    assert findings == []


def test_a_steady_queue_that_drains_gives_nothing() -> None:
    findings, undecided = judge(
        series(lambda t: [0, 2, 1, 0][int(t / STEP) % 4], completed=int),
        workers(cores=0.4),
    )

    assert findings == []
    assert not undecided


def test_pending_work_with_nothing_completed_is_a_stall() -> None:
    findings, _ = judge(series(lambda t: 20 + 0.5 * t, completed=lambda t: 1234), workers())

    stalled = only(findings, STALLED)
    assert stalled.severity.value == "critical"
    assert evidence_as(stalled, QueueEvidence).completed_in_window == 0
    assert "nothing completed in 1m" in stalled.summary
    assert Related(GROWING, TARGET, SUBJECT) in stalled.related


def test_a_queue_that_does_not_drain_while_its_workers_idle_is_a_stall() -> None:
    findings, _ = judge(series(lambda t: 40 + (t % 4)), workers(cores=0.02))

    assert kinds(findings) == {STALLED}
    stalled = only(findings, STALLED)
    assert "not draining" in stalled.summary
    assert "its workers used 2.0% of a core over 1m" in stalled.summary
    assert evidence_as(stalled, QueueEvidence).worker_cpu_cores == 0.02


def test_busy_workers_that_fall_behind_give_growth_but_no_stall() -> None:
    findings, _ = judge(series(lambda t: 10 + 2 * t), workers(cores=1.8))

    assert kinds(findings) == {GROWING}
    assert "its workers used 180.0% of a core" in only(findings, GROWING).summary


def test_completions_overrule_low_cpu_for_workers_that_wait_on_the_network() -> None:
    findings, _ = judge(
        series(lambda t: 30 + (t % 3), completed=lambda t: int(t * 2)), workers(cores=0.01)
    )

    assert STALLED not in kinds(findings)


def test_a_queue_with_no_worker_group_and_no_completions_can_only_grow() -> None:
    findings, undecided = judge(series(lambda t: 10 + t))

    assert kinds(findings) == {GROWING}
    assert not undecided


def test_an_empty_moment_in_the_window_means_the_queue_drains() -> None:
    findings, _ = judge(series(lambda t: 0 if t < 4 else 5, completed=lambda t: 7), workers())

    assert STALLED not in kinds(findings)


def test_a_queue_watched_for_less_than_most_of_its_window_is_undecided() -> None:
    findings, undecided = judge(series(lambda t: 10 + 5 * t, seconds=WINDOW / 2))

    assert findings == []
    assert undecided == {(GROWING, SUBJECT), (STALLED, SUBJECT)}


def test_a_stall_waits_for_worker_cpu_covering_the_window() -> None:
    short_cpu = WorkerInput(
        WorkerGroup("webhook-workers", ("webhooks",), ProcessMatch(cmdline="w")),
        cpu(0.0, seconds=WINDOW / 3),
    )

    findings, undecided = judge(series(lambda t: 40), (short_cpu,))

    assert STALLED not in kinds(findings)
    assert undecided == {(STALLED, SUBJECT)}


def test_completions_count_only_increases() -> None:
    samples = [QueueSample(ago(10 - i), 5, completed_total=n) for i, n in enumerate([9, 7, 7, 8])]

    assert completed_in(samples) == 1
    assert completed_in([QueueSample(NOW, 5)]) is None


def stalled_chain(context: LockContext, sessions: list[Backend]) -> tuple[Finding, QueueLockChain]:
    """The stall of a queue growing with nothing completed, whose workers'
    ``sessions`` wait as ``context`` says, and the lock chain it names."""
    findings, _ = judge(
        series(lambda t: 100 + 0.5 * t, completed=lambda t: 77), workers(sessions=sessions), context
    )
    stalled = only(findings, STALLED)
    chain = evidence_as(stalled, QueueStallEvidence).lock
    assert chain is not None
    return stalled, chain


def test_a_stall_names_the_lock_its_workers_wait_on_and_the_idle_holder() -> None:
    settings_ = LockSettings(
        convoy_waiters=2,
        convoy_wait=1.0,
        named=(NamedLock("webhook-delivery", key(42), max_hold=30.0),),
    )
    holder = backend(
        1234,
        "webhook-worker-6",
        addr="10.0.0.5",
        idle_for=340,
        query="SELECT pg_advisory_lock(42)",
    )
    waiters = [backend(1300 + n, f"webhook-worker-{n}", waits_on=[1234]) for n in range(1, 6)]
    snap = snapshot(
        held(42, 1234, held_for=345),
        *(waiting(42, w.pid, waited_for=300) for w in waiters),
        backends=[holder, *waiters],
    )
    lock_findings = tuple(detect_locks(snap, settings_, NOW))

    stalled, chain = stalled_chain(LockContext(snap, settings_, lock_findings), [*waiters, holder])
    assert chain.lock == "webhook-delivery"
    assert chain.key == "42"
    assert chain.waiting_sessions == 5
    assert chain.worker_sessions == 6
    (facts,) = chain.holders
    assert facts.pid == 1234
    assert facts.application_name == "webhook-worker-6"
    assert facts.client_addr == "10.0.0.5"
    assert facts.state == "idle"
    assert facts.state_seconds == 340
    assert facts.query == "SELECT pg_advisory_lock(42)"
    assert facts.worker_group == "webhook-workers"
    lock_subject = Subject(DB, "webhook-delivery")
    related = stalled.related
    assert Related(FindingKind.LOCK_CONVOY, TARGET, lock_subject) in related
    assert Related(FindingKind.LOCK_HELD_TOO_LONG, TARGET, lock_subject) in related
    assert (
        "5 of 6 worker sessions wait on lock webhook-delivery (42) held by pid 1234 "
        '(webhook-worker-6 from 10.0.0.5) idle 5m40s since "SELECT pg_advisory_lock(42)"'
    ) in stalled.summary
    workers_facts = evidence_as(stalled, QueueEvidence).workers[0]
    assert workers_facts.sessions is not None
    assert workers_facts.sessions.waiting_lock == 5
    assert to_json(workers_facts.waiting_on) == [
        {"database": DB, "lock": "webhook-delivery", "key": "42", "sessions": 5}
    ]


def test_a_stall_behind_a_hung_worker_s_row_lock_is_one_incident_with_its_row_lock_convoy() -> None:
    """Workers claiming with FOR UPDATE (no SKIP LOCKED) behind one that hangs
    in an HTTP call inside its transaction: the first waits on its
    transaction id, the others on the row's tuple behind the first."""
    hung = backend(
        1234,
        "webhook-worker-6",
        state="idle in transaction",
        idle_for=340,
        xact_for=345,
        query="SELECT id FROM jobs LIMIT 1 FOR UPDATE",
    )
    waiters = [backend(1300 + n, f"webhook-worker-{n}", waits_on=[1234]) for n in range(1, 6)]
    rows = [
        LockRowFact(1234, "transactionid", "transactionid:900", "ExclusiveLock", True),
        LockRowFact(1301, "transactionid", "transactionid:900", "ShareLock", False, ago(300)),
        LockRowFact(1301, "tuple", "tuple:5:16384:0:1", "ExclusiveLock", True, None, "jobs"),
        *(
            LockRowFact(
                w.pid, "tuple", "tuple:5:16384:0:1", "ExclusiveLock", False, ago(290), "jobs"
            )
            for w in waiters[1:]
        ),
    ]
    snap = replace(snapshot(backends=[hung, *waiters]), waits=lock_waits(rows))
    settings_ = LockSettings(row_lock_wait=30.0)
    lock_findings = tuple(detect_lock_waits(snap, settings_, NOW))

    stalled, chain = stalled_chain(LockContext(snap, settings_, lock_findings), [*waiters, hung])
    assert (chain.lock, chain.locktype, chain.database) == ("a row of jobs", "transactionid", DB)
    assert (chain.waiting_sessions, chain.worker_sessions) == (5, 6)
    (facts,) = chain.holders
    assert (facts.pid, facts.state, facts.worker_group) == (
        1234,
        "idle in transaction",
        "webhook-workers",
    )
    assert "5 of 6 worker sessions wait on a row of jobs held by pid 1234" in stalled.summary
    convoy = next(f for f in lock_findings if f.kind is FindingKind.ROW_LOCK_CONVOY)
    assert Related(FindingKind.ROW_LOCK_CONVOY, TARGET, convoy.subject) in stalled.related
    (group,) = tell_incidents([*lock_findings, stalled], snap)
    assert {f.kind for f in group.findings} >= {FindingKind.ROW_LOCK_CONVOY, STALLED}
    assert (group.root.kind, group.root.pid) == (RootKind.SESSION, 1234)
    # The same root whichever fires first: the stall alone names the hung worker too.
    (alone,) = tell_incidents([stalled], snap)
    assert alone.root.identity == group.root.identity


def test_a_stall_without_lock_waits_has_no_lock_in_its_evidence() -> None:
    idle = [backend(1300 + n, f"webhook-worker-{n}", idle_for=60) for n in range(3)]
    context = LockContext(snapshot(backends=idle), LockSettings())

    findings, _ = judge(
        series(lambda t: 30, completed=lambda t: 5), workers(sessions=idle), context
    )

    stalled = only(findings, STALLED)
    assert evidence_as(stalled, QueueStallEvidence).lock is None
    sessions = evidence_as(stalled, QueueEvidence).workers[0].sessions
    assert sessions is not None
    assert sessions.idle == 3


def test_samples_older_than_the_window_do_not_count() -> None:
    old_growth = tuple(
        QueueSample(ago(WINDOW * 3 - i * STEP), depth=i * 10) for i in range(20)
    ) + series(lambda t: 200)

    findings, _ = judge(old_growth)

    assert findings == []
    assert NOW - old_growth[-1].at == timedelta(0)

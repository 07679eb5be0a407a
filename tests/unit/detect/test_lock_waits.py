"""lock_queue, row_lock_convoy and idle_in_transaction_blocker from synthetic
waits: each about the session at the root, each only past its budget."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from lockwatch.detect.incidents import tell_incidents
from lockwatch.detect.lock_waits import detect_lock_waits
from lockwatch.model.evidence import LockWaitEvidence
from lockwatch.model.findings import Finding, FindingKind
from lockwatch.model.incidents import RootKind
from lockwatch.model.lock_waits import LockRowFact, PreparedXact, lock_waits
from lockwatch.model.locks import LockSnapshot
from lockwatch.model.next_step import next_step
from lockwatch.settings.locks import LockSettings
from tests.fixtures.evidence import evidence_as
from tests.fixtures.snapshots import NOW, TARGET, ago, backend

TABLE = "relation:5:16384"
XID = "transactionid:900"
ROW = "tuple:5:16384:0:1"
SETTINGS = LockSettings()


def row(pid: int, tag: str, mode: str, waited: float | None = None) -> LockRowFact:
    """A lock held (``waited`` None) or waited on for ``waited`` seconds."""
    return LockRowFact(
        pid,
        tag.partition(":")[0],
        tag,
        mode,
        waited is None,
        None if waited is None else ago(waited),
        "jobs" if tag != XID else None,
    )


def snapshot(rows: list[LockRowFact], **states: str) -> LockSnapshot:
    """The waits of ``rows``; pid 1 idle in transaction for 2 minutes unless ``states`` say."""
    pids = sorted({r.pid for r in rows})
    backends = {
        pid: backend(
            pid,
            state=states.get(f"p{pid}", "idle in transaction" if pid == 1 else "active"),
            xact_for=120.0 if pid == 1 else 10.0,
            query="SELECT count(*) FROM jobs" if pid == 1 else f"query of {pid}",
        )
        for pid in pids
    }
    return LockSnapshot(TARGET, NOW, 180000, (), backends, waits=lock_waits(rows))


def kinds(findings: list[Finding]) -> dict[FindingKind, Finding]:
    return {finding.kind: finding for finding in findings}


def alter_queue(queued_for: float, readers: int = 2) -> list[LockRowFact]:
    return [
        row(1, TABLE, "AccessShareLock"),
        row(2, TABLE, "AccessExclusiveLock", 60.0),
        *(row(10 + n, TABLE, "AccessShareLock", queued_for - n) for n in range(readers)),
    ]


def test_an_alter_with_two_sessions_queued_behind_it_for_5s_is_a_lock_queue_rooted_at_the_reader() -> (
    None
):
    found = kinds(detect_lock_waits(snapshot(alter_queue(6.0)), SETTINGS, NOW))
    queue = found[FindingKind.LOCK_QUEUE]
    evidence = evidence_as(queue, LockWaitEvidence)
    assert (evidence.root.pid, evidence.root.state, evidence.root.xact_seconds) == (
        1,
        "idle in transaction",
        120.0,
    )
    assert evidence.waiting is not None and evidence.waiting.pid == 2
    assert (evidence.queued, evidence.waiter_count, evidence.relation) == (2, 3, "jobs")
    assert queue.subject.lock == "pid 1"
    assert "lock_timeout" in evidence.advice
    assert "AccessExclusiveLock on jobs (pid 2: query of 2) waits behind pid 1" in queue.summary
    # The reader idle in transaction is the same root: one incident.
    assert FindingKind.IDLE_IN_TRANSACTION_BLOCKER in found
    (group,) = tell_incidents(list(found.values()), None)
    assert (group.root.kind, group.root.pid) == (RootKind.SESSION, 1)
    step = next_step(group.root, group.findings, FindingKind.LOCK_QUEUE, "/runbooks")
    assert "pg_cancel_backend" in step.action and "(VALUES (2))" in step.action
    assert step.sql is not None and "pg_terminate_backend" in step.sql


def test_a_queue_shorter_or_younger_than_its_budget_is_no_lock_queue() -> None:
    assert FindingKind.LOCK_QUEUE not in kinds(
        detect_lock_waits(snapshot(alter_queue(4.0)), SETTINGS, NOW)
    )
    assert FindingKind.LOCK_QUEUE not in kinds(
        detect_lock_waits(snapshot(alter_queue(60.0, readers=1)), SETTINGS, NOW)
    )
    # The second queued session decides: it has queued 5 s, the first longer.
    assert FindingKind.LOCK_QUEUE in kinds(
        detect_lock_waits(snapshot(alter_queue(6.0, readers=3)), SETTINGS, NOW)
    )


def test_a_hung_worker_s_row_is_a_row_lock_convoy_past_30s_and_not_before() -> None:
    def convoy(waited: float) -> list[LockRowFact]:
        return [
            row(1, XID, "ExclusiveLock"),
            row(2, ROW, "ExclusiveLock"),
            row(2, XID, "ShareLock", waited),
            row(3, ROW, "ExclusiveLock", waited - 1),
            row(4, ROW, "ExclusiveLock", waited - 2),
        ]

    hung = snapshot(convoy(31.0), p1="idle in transaction")
    found = kinds(detect_lock_waits(hung, SETTINGS, NOW))
    evidence = evidence_as(found[FindingKind.ROW_LOCK_CONVOY], LockWaitEvidence)
    assert (evidence.root.pid, evidence.queued, evidence.relation) == (1, 3, "jobs")
    assert evidence.root.query == "SELECT count(*) FROM jobs"
    assert FindingKind.LOCK_QUEUE not in found
    assert detect_lock_waits(snapshot(convoy(29.0), p1="active"), SETTINGS, NOW) == []


def test_an_active_holder_with_short_waits_is_no_finding() -> None:
    rows = [row(1, TABLE, "RowExclusiveLock"), row(2, TABLE, "ShareLock", 3.0)]
    assert detect_lock_waits(snapshot(rows, p1="active"), SETTINGS, NOW) == []


def test_an_idle_in_transaction_blocker_needs_a_wait_past_its_budget() -> None:
    rows = [row(1, TABLE, "RowExclusiveLock"), row(2, TABLE, "ShareLock", 11.0)]
    found = kinds(detect_lock_waits(snapshot(rows), SETTINGS, NOW))
    assert set(found) == {FindingKind.IDLE_IN_TRANSACTION_BLOCKER}
    shorter = replace(SETTINGS, idle_blocker_wait=12.0)
    assert detect_lock_waits(snapshot(rows), shorter, NOW) == []


@given(st.lists(st.floats(0.0, 4.9), max_size=12))
def test_waits_all_shorter_than_every_budget_are_never_findings(waits: list[float]) -> None:
    rows = [row(1, TABLE, "AccessShareLock"), row(2, XID, "ExclusiveLock")]
    for n, waited in enumerate(waits):
        tag, mode = [(TABLE, "AccessExclusiveLock"), (XID, "ShareLock")][n % 2]
        rows.append(row(100 + n, tag, mode, waited))
    assert detect_lock_waits(snapshot(rows), SETTINGS, NOW) == []


def test_waits_behind_two_prepared_transactions_are_a_convoy_each_rooted_at_its_gid() -> None:
    """pid 0 holds both rows: the waits are told apart by the prepared
    transaction each chain ends at, a waiter queued behind another (on the
    row's tuple) with the one ahead of it."""
    deploy, report = (
        PreparedXact(900 + n, gid, "app", "app", ago(600), 600.0)
        for n, gid in enumerate(("deploy-7", "report-2"))
    )
    rows = [
        LockRowFact(0, "transactionid", "transactionid:900", "ExclusiveLock", True),
        LockRowFact(0, "transactionid", "transactionid:901", "ExclusiveLock", True),
        LockRowFact(11, "transactionid", "transactionid:900", "ShareLock", False, ago(40.0)),
        LockRowFact(11, "tuple", ROW, "ExclusiveLock", True, None, "jobs"),
        LockRowFact(12, "tuple", ROW, "ExclusiveLock", False, ago(35.0), "jobs"),
        LockRowFact(21, "transactionid", "transactionid:901", "ShareLock", False, ago(50.0)),
    ]
    # What the sampler adds: the prepared transaction each direct waiter waits on.
    prepared = {"transactionid:900": deploy, "transactionid:901": report}
    waits = tuple(
        replace(wait, prepared=prepared.get(wait.tag)) if 0 in wait.hard else wait
        for wait in lock_waits(rows)
    )
    sessions = {pid: b for pid, b in snapshot(rows).backends.items() if pid != 0}  # none for 0
    snap = replace(snapshot(rows), waits=waits, backends=sessions)

    found = detect_lock_waits(snap, SETTINGS, NOW)

    convoys = {f.subject.lock: evidence_as(f, LockWaitEvidence) for f in found}
    assert set(convoys) == {"prepared deploy-7", "prepared report-2"}
    assert {f.kind for f in found} == {FindingKind.ROW_LOCK_CONVOY}
    assert convoys["prepared deploy-7"].queued == 2 and convoys["prepared report-2"].queued == 1
    first = convoys["prepared deploy-7"].root.prepared
    assert first is not None and (first.gid, first.transaction) == ("deploy-7", 900)
    roots = {group.root.gid: group.root.kind for group in tell_incidents(found, snap)}
    assert roots == {"deploy-7": RootKind.PREPARED, "report-2": RootKind.PREPARED}

"""Findings grouped by root cause: one incident per thing to act on."""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from lockwatch.detect.incidents import group_findings, root_loads, tell_incidents
from lockwatch.detect.locks import detect_locks
from lockwatch.detect.sources import detect_source_down
from lockwatch.model.evidence import (
    CapacityEvidence,
    LinkedClientFacts,
    LockEvidence,
    LockHolderFacts,
    PooledLockEvidence,
    PoolFacts,
    PreparedFacts,
    QueueEvidence,
    QueueLockChain,
    QueueStallEvidence,
    ServerConnectionFacts,
    SourceBlocker,
    WorkerFacts,
)
from lockwatch.model.findings import Finding, FindingKind, Severity, Subject
from lockwatch.model.incident_text import RUNBOOKS_PATH, runbook_link
from lockwatch.model.incidents import IncidentRoot, RootKind
from lockwatch.model.lock_waits import LockWait, PreparedXact
from lockwatch.model.locks import LockSnapshot
from lockwatch.model.queues import SessionWait
from lockwatch.model.remediation import sql_literal, terminate_sql
from lockwatch.model.views import SourceHealth
from lockwatch.settings.locks import LockSettings, NamedLock
from tests.fixtures.evidence import (
    evidence_of,
    findings_of_every_kind,
    holder,
    lock_evidence,
    queue_evidence,
)
from tests.fixtures.incident_values import worded
from tests.fixtures.paths import ROOT
from tests.fixtures.snapshots import DB, NOW, TARGET, backend, held, held_by, key, snapshot
from tests.unit.detect.test_locks import seed_002_convoy, snapshots_with_settings

SEED_002 = LockSettings(
    orphan_after=120.0, named=(NamedLock("webhook-delivery", key(42), max_hold=60.0),)
)


def stall_on(pid: int, snap: LockSnapshot, queue: str = "webhooks") -> Finding:
    """A stalled queue whose workers wait on lock 42, held by ``pid``."""
    seen = snap.backends.get(pid)
    lock_holder = LockHolderFacts(
        pid=pid,
        application_name=None if seen is None else seen.application_name,
        client_addr=None,
        state="idle",
        state_seconds=330.0,
        wait_event_type=None,
        wait_event=None,
        query=None,
        blocked_by=(),
        held_seconds=340.0,
        worker_group="webhook-workers",
        backend_start=None if seen is None else seen.backend_start,
    )
    chain = QueueLockChain(DB, "webhook-delivery", "42", 5, 6, (lock_holder,))
    evidence = QueueStallEvidence.of(queue_evidence(queue), chain)
    return Finding(
        FindingKind.QUEUE_STALLED,
        TARGET,
        Subject(queue=queue),
        Severity.CRITICAL,
        NOW,
        "",
        evidence,
    )


def growing(queue: str = "webhooks") -> Finding:
    return Finding(
        FindingKind.QUEUE_GROWING,
        TARGET,
        Subject(queue=queue),
        Severity.WARNING,
        NOW,
        "",
        queue_evidence(queue),
    )


def test_the_hung_webhook_worker_is_one_incident_with_its_convoy_and_stalled_queue() -> None:
    snap = seed_002_convoy()
    findings = [*detect_locks(snap, SEED_002, NOW), stall_on(1234, snap), growing()]

    (told,) = tell_incidents(findings, snap)

    assert told.root.kind is RootKind.SESSION
    assert (told.root.pid, told.root.backend_start) == (1234, snap.backends[1234].backend_start)
    assert {f.kind for f in told.findings} == {
        FindingKind.LOCK_CONVOY,
        FindingKind.LOCK_HELD_TOO_LONG,
        FindingKind.LOCK_ORPHANED,
        FindingKind.QUEUE_STALLED,
        FindingKind.QUEUE_GROWING,
    }
    assert worded(told)[0] == (
        "pid 1234 webhook-worker-1 holds webhook-delivery (42), idle 5m30s, 5 waiting, "
        "queue webhooks stalled"
    )
    assert told.waiters == 5
    assert told.load is not None and told.load.locks_held == 1
    step = worded(told)[1]
    assert told.root.backend_start is not None
    assert step.sql == terminate_sql(1234, told.root.backend_start)
    assert "Guarded: lockwatch terminate <incident id> -c FILE" in step.action
    # The holder is idle: ending it rolls nothing back.
    assert step.cost is not None and step.cost.startswith("as lockwatch saw it (idle): it has no")
    assert step.runbook.startswith(RUNBOOKS_PATH + "#lockwatch")


def test_a_stall_without_a_holder_is_the_queue_and_its_growth_joins_it() -> None:
    stall = replace(
        stall_on(1234, snapshot()), evidence=QueueStallEvidence.of(queue_evidence(), None)
    )
    (told,) = tell_incidents([growing(), stall], None)

    assert told.root == IncidentRoot(RootKind.QUEUE, TARGET, queue="webhooks")
    assert told.load is None
    assert worded(told)[1].sql is None


def test_a_session_holding_4001_locks_is_one_incident_that_counts_them() -> None:
    locks = [held(k, 7023, held_for=900) for k in range(1, 4002)]
    psql = backend(7023, "psql", idle_for=800, query="SELECT pg_advisory_lock(4001)")
    snap = snapshot(*locks, backends=[psql])
    findings = detect_locks(snap, LockSettings(max_hold=60.0, orphan_after=120.0), NOW)
    # One finding per kind, both about the session.
    assert [(f.kind, f.subject) for f in findings] == [
        (FindingKind.LOCK_HELD_TOO_LONG, held_by(7023)),
        (FindingKind.LOCK_ORPHANED, held_by(7023)),
    ]

    (told,) = tell_incidents(findings, snap)

    assert told.root.pid == 7023
    assert told.load is not None
    assert told.load.locks_held == 4001
    assert len(told.load.locks) == 5
    assert worded(told)[0] == "pid 7023 psql holds 4001 locks (1, …), idle 13m20s"


def test_a_prepared_transaction_is_rolled_back_with_its_gid_quoted() -> None:
    gid = "it's\\here"
    prepared = PreparedFacts(gid, "app", DB, NOW, 1234)
    facts = holder(0, prepared=prepared, application_name=None)
    finding = Finding(
        FindingKind.LOCK_ORPHANED,
        TARGET,
        Subject(DB, "42"),
        Severity.CRITICAL,
        NOW,
        "",
        lock_evidence(holder_pid=0, holders=(facts,)),
    )
    (told,) = tell_incidents([finding], None)

    assert told.root == IncidentRoot(RootKind.PREPARED, TARGET, gid=gid, database=DB)
    assert worded(told)[1].sql == "ROLLBACK PREPARED E'it''s\\\\here';"
    assert sql_literal("plain") == "'plain'"


def pooled(finding: Finding, client_port: int) -> Finding:
    """``finding`` as pgbouncer shows it: a server connection lent to a client."""
    assert isinstance(finding.evidence, type(lock_evidence()))
    evidence = PooledLockEvidence.of(
        finding.evidence,
        PoolFacts(DB, "app", "transaction"),
        ServerConnectionFacts(1234, "active", 6432, None, None),
        LinkedClientFacts("10.0.0.9", client_port, "web", "active", None),
    )
    return replace(finding, kind=FindingKind.LOCK_POOLED_SESSION, evidence=evidence)


def test_pgbouncer_s_view_coming_and_going_keeps_the_root_s_fingerprint() -> None:
    snap = seed_002_convoy()
    plain = detect_locks(snap, SEED_002, NOW)
    with_pooler = [*plain, pooled(plain[0], 40001)]

    (alone,) = group_findings(plain)
    (joined,) = group_findings(with_pooler)

    assert joined.root.kind is RootKind.POOLED_BACKEND
    assert joined.root.fingerprint == alone.root.fingerprint


@given(snapshots_with_settings(), st.randoms(use_true_random=False))
def test_every_finding_is_in_exactly_one_incident_whatever_their_order(
    case: tuple[LockSnapshot, LockSettings], shuffler: random.Random
) -> None:
    snap, settings_ = case
    findings = detect_locks(snap, settings_, NOW)
    groups = group_findings(findings)
    members = [f for g in groups for f in g.findings]
    assert sorted(map(repr, members)) == sorted(map(repr, findings))
    assert len({g.root.fingerprint for g in groups}) == len(groups)

    reshuffled = findings[:]
    shuffler.shuffle(reshuffled)
    partition = {
        g.root.fingerprint: {f.identity for f in g.findings} for g in group_findings(reshuffled)
    }
    assert partition == {g.root.fingerprint: {f.identity for f in g.findings} for g in groups}


@given(snapshots_with_settings())
def test_a_finding_s_root_does_not_depend_on_the_others(
    case: tuple[LockSnapshot, LockSettings],
) -> None:
    """Ranks reshuffle (a finding moves past the cap, another appears): each
    finding's root stays the one it has alone, so no incident resolves for it."""
    snap, settings_ = case
    findings = detect_locks(snap, settings_, NOW)
    together = {
        f.identity: g.root.fingerprint for g in group_findings(findings) for f in g.findings
    }
    for finding in findings:
        (alone,) = group_findings([finding])
        assert alone.root.fingerprint == together[finding.identity]


def waiting_growth(database: str) -> Finding:
    """A growing queue whose workers wait on webhook-delivery in ``database``."""
    workers = (
        WorkerFacts(
            "webhook-workers", 6, 0.01, None, (SessionWait(database, "webhook-delivery", "42", 5),)
        ),
    )
    return replace(growing(), evidence=queue_evidence(workers=workers))


def test_a_growing_queue_whose_workers_wait_on_a_blamed_lock_joins_its_holder() -> None:
    snap = seed_002_convoy()
    locks = detect_locks(snap, SEED_002, NOW)
    (told,) = group_findings([*locks, waiting_growth(DB)])
    assert told.root.pid == 1234
    assert len(group_findings([*locks, waiting_growth("elsewhere")])) == 2


def test_a_backlog_outlasting_its_holder_stays_in_the_holder_s_incident() -> None:
    locks = detect_locks(seed_002_convoy(), SEED_002, NOW)
    (before,) = group_findings([*locks, waiting_growth(DB)])
    previous = {f.identity: before.root for f in before.findings}
    (after,) = group_findings([growing()], previous)
    assert after.root == before.root
    (fresh,) = group_findings([growing()])
    assert fresh.root.kind is RootKind.QUEUE


@given(snapshots_with_settings())
def test_titles_and_next_steps_stay_one_line_whatever_the_clients_send(
    case: tuple[LockSnapshot, LockSettings],
) -> None:
    snap, settings_ = case
    for told in tell_incidents(detect_locks(snap, settings_, NOW), snap):
        for text in (worded(told)[0], worded(told)[1].action, worded(told)[1].sql or ""):
            assert text.isprintable(), text


def test_a_queue_stalled_behind_a_prepared_transaction_joins_its_incident() -> None:
    prepared = PreparedFacts("tx-1", "app", DB, NOW, 1234)
    orphan = Finding(
        FindingKind.LOCK_ORPHANED,
        TARGET,
        Subject(DB, "42"),
        Severity.CRITICAL,
        NOW,
        "",
        lock_evidence(holder_pid=0, holders=(holder(0, prepared=prepared),)),
    )
    stall = stall_on(0, snapshot())
    assert isinstance(stall.evidence, QueueStallEvidence) and stall.evidence.lock is not None
    chain = replace(stall.evidence.lock, lock="42")
    stall = replace(stall, evidence=replace(stall.evidence, lock=chain))

    (told,) = group_findings([orphan, stall, growing()])
    assert told.root.kind is RootKind.PREPARED
    (alone,) = group_findings([stall])
    assert alone.root.kind is RootKind.QUEUE  # pid 0 is no session to end


def test_a_holder_seen_once_without_its_backend_start_stays_the_same_incident() -> None:
    locks = detect_locks(seed_002_convoy(), SEED_002, NOW)
    (seen,) = group_findings(locks)
    unseen = [
        replace(
            f,
            evidence=replace(
                f.evidence,
                holders=tuple(replace(h, backend_start=None) for h in f.evidence.holders),
            ),
        )
        for f in locks
        if isinstance(f.evidence, LockEvidence)
    ]
    previous = {f.identity: seen.root for f in seen.findings}
    (kept,) = group_findings(unseen, previous)
    assert kept.root.fingerprint == seen.root.fingerprint
    (fresh,) = group_findings(unseen)
    assert fresh.root.fingerprint != seen.root.fingerprint


def test_every_kind_has_a_root_a_title_and_a_runbook_section_that_exists() -> None:
    findings = findings_of_every_kind()
    groups = tell_incidents(findings, None)
    assert sorted(map(repr, (f for g in groups for f in g.findings))) == sorted(map(repr, findings))
    kinds = {g.root.kind for g in groups}
    assert {RootKind.JOB, RootKind.TARGET, RootKind.QUEUE, RootKind.LOCK} <= kinds
    headings = {
        line.removeprefix("## ").strip().lower()
        for line in (ROOT / "docs" / "runbooks.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("## ")
    }
    for kind in FindingKind:
        anchor = runbook_link(RUNBOOKS_PATH, kind.value).rsplit("#", 1)[1]
        assert anchor in headings, kind
    for group in groups:
        assert worded(group)[0] and worded(group)[1].action
        assert worded(group)[1].runbook.startswith(RUNBOOKS_PATH + "#")


def test_a_queue_whose_jobs_run_twice_is_titled_by_its_finding_not_as_growing() -> None:
    rescued = next(
        f for f in findings_of_every_kind() if f.kind is FindingKind.JOB_RESCUED_WHILE_RUNNING
    )
    (told,) = tell_incidents([rescued], None)
    assert told.root.kind is RootKind.QUEUE
    # the root first (the fixture's summary does not name it), then its finding
    assert worded(told)[0] == f"queue {rescued.subject.queue}: {rescued.summary}"
    (both,) = tell_incidents([rescued, growing(rescued.subject.queue or "")], None)
    assert worded(both)[0].startswith(f"queue {rescued.subject.queue}: ")


def test_a_queue_losing_capacity_to_a_lock_wait_joins_the_lock_holder_s_incident() -> None:
    locks = detect_locks(seed_002_convoy(), SEED_002, NOW)
    waiting = waiting_growth(DB).evidence
    assert isinstance(waiting, QueueEvidence)
    capacity = evidence_of(FindingKind.QUEUE_CAPACITY_LOST, Subject(queue="webhooks"))
    assert isinstance(capacity, CapacityEvidence)
    lost = Finding(
        FindingKind.QUEUE_CAPACITY_LOST,
        TARGET,
        Subject(queue="webhooks"),
        Severity.WARNING,
        NOW,
        "",
        replace(capacity, workers=waiting.workers),
    )
    (told,) = group_findings([*locks, lost])
    assert told.root.pid == 1234
    alone = replace(lost, evidence=evidence_of(lost.kind, lost.subject))
    assert group_findings([alone])[0].root.kind is RootKind.QUEUE


def test_a_source_timed_out_behind_a_holder_joins_the_holders_incident() -> None:
    """One root cause, one incident: the holder's convoy and the queue source
    its lock timed out (issue 25 item 6); a source down for another reason
    stays the target's."""
    snap = seed_002_convoy()
    locks = detect_locks(snap, LockSettings(), NOW)
    blocker = SourceBlocker(1234, "AccessExclusiveLock", "pgboss.job", "webhook-worker-1")
    failing = SourceHealth(
        "queue/mail", failing_since=NOW, error="lock timeout", blocked_by=(blocker,)
    )
    (down,) = detect_source_down(TARGET, [failing], NOW)
    assert down.summary.endswith(
        "; blocked by pid 1234 (webhook-worker-1) holding AccessExclusiveLock on pgboss.job"
    )
    (other,) = detect_source_down(
        TARGET, [SourceHealth("queue/other", failing_since=NOW, error="boom")], NOW
    )
    groups = group_findings([*locks, down, other])
    assert [(g.root.kind, g.root.pid) for g in groups] == [
        (RootKind.SESSION, 1234),
        (RootKind.TARGET, None),
    ]
    assert down in groups[0].findings and other in groups[1].findings


def _wait(pid: int, hard: tuple[int, ...], soft: tuple[int, ...] = ()) -> LockWait:
    return LockWait(pid, "relation", "AccessShareLock", "relation:1", "jobs", NOW, hard, soft, 0)


def test_a_root_s_waiters_are_the_whole_queue_behind_the_ddl_it_blocks() -> None:
    # pid 10 idle in transaction; pid 11's ALTER waits on it; 12 and 13 queue behind the
    # ALTER (soft); 14 waits on 12: every one of them waits because of 10.
    waits = (_wait(11, (10,)), _wait(12, (), (11,)), _wait(13, (), (11,)), _wait(14, (12,)))
    snap = replace(snapshot(held(7, pid=10)), waits=waits)
    session = IncidentRoot(RootKind.SESSION, TARGET, pid=10)
    blocked = IncidentRoot(RootKind.SESSION, TARGET, pid=11)
    loads = root_loads([session, blocked], snap)
    assert loads[session.identity].waiters == 4
    assert loads[blocked.identity].waiters == 0  # it waits itself: the root is pid 10


def test_a_prepared_transaction_s_waiters_are_counted_by_its_gid() -> None:
    xact = PreparedXact(753, "nightly-7", "app", DB, NOW, 900.0)
    other = PreparedXact(754, "nightly-8", "app", DB, NOW, 900.0)
    waits = (
        replace(_wait(21, (0,)), prepared=xact),
        replace(_wait(22, (0,)), prepared=xact),
        replace(_wait(23, (0,)), prepared=other),
    )
    snap = replace(snapshot(), waits=waits)
    root = IncidentRoot(RootKind.PREPARED, TARGET, gid="nightly-7")
    assert root_loads([root], snap)[root.identity].waiters == 2

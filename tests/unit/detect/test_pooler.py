"""lock_pooled_session: a session advisory lock on a backend that a
transaction-mode pooler hands out per transaction (seed 000)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockwatch.detect.locks import detect_locks
from lockwatch.detect.pooler import PoolMemory, infer_pooled
from lockwatch.model.evidence import LockEvidence, PooledLockEvidence
from lockwatch.model.evidence.json_form import object_json
from lockwatch.model.findings import Finding, FindingKind
from lockwatch.model.locks import AdvisoryLock, Backend
from lockwatch.model.pooler import PoolerConnection, PoolerSnapshot
from lockwatch.settings.locks import AllowedHolders, LockRole, LockSettings, NamedLock
from tests.fixtures.evidence import evidence_as, pgbouncer_facts
from tests.fixtures.snapshots import NOW, ago, backend, held, held_by, key, snapshot

BACKEND_PID = 4242
POOLER_PORT = 51000


def server(
    pid: int = BACKEND_PID, *, link: str = "", local_port: int | None = POOLER_PORT
) -> PoolerConnection:
    return PoolerConnection(
        ptr="0xs1",
        link=link,
        database="app",
        user="scheduler",
        state="used" if not link else "active",
        addr="127.0.0.1",
        port=5432,
        local_addr="127.0.0.1",
        local_port=local_port,
        connect_time="2025-03-14 03:00:00 UTC",
        request_time="2025-03-14 03:00:01 UTC",
        application_name="app-1",
        remote_pid=pid,
    )


def client(ptr: str = "0xc2", app: str = "app-2") -> PoolerConnection:
    return PoolerConnection(
        ptr=ptr,
        link="0xs1",
        database="app",
        user="scheduler",
        state="active",
        addr="10.0.0.2",
        port=40000,
        local_addr=None,
        local_port=None,
        connect_time=None,
        request_time=None,
        application_name=app,
    )


def pooler(
    mode: str = "transaction",
    *servers: PoolerConnection,
    clients: tuple[PoolerConnection, ...] = (),
) -> PoolerSnapshot:
    return PoolerSnapshot(NOW, {("app", "scheduler"): mode}, servers or (server(),), clients)


def pooled_backend(**overrides: Any) -> Backend:
    session = backend(BACKEND_PID, "app-1", addr="127.0.0.1", state="idle", idle_for=5)
    return replace(session, client_port=POOLER_PORT, **overrides)


def findings_for(
    pool: PoolerSnapshot,
    session: Backend,
    held_for: float = 60,
    session_level: bool | None = None,
) -> list[Finding]:
    lock = replace(held(42, BACKEND_PID, held_for=held_for), session_level=session_level)
    snap = snapshot(lock, backends=[session])
    return [
        f
        for f in detect_locks(snap, LockSettings(), NOW, pool)
        if f.kind is FindingKind.LOCK_POOLED_SESSION
    ]


def test_it_reports_a_session_lock_on_a_transaction_pooled_backend_with_the_pool() -> None:
    (finding,) = findings_for(pooler(), pooled_backend())
    assert finding.subject == held_by(BACKEND_PID)  # a pooled backend is a session
    assert evidence_as(finding, LockEvidence).key == "42"
    assert finding.severity.value == "critical"
    assert object_json(pgbouncer_facts(finding)[0]) == {
        "database": "app",
        "user": "scheduler",
        "pool_mode": "transaction",
    }
    assert pgbouncer_facts(finding)[1].backend_pid == BACKEND_PID
    assert evidence_as(finding, PooledLockEvidence).linked_client is None
    assert evidence_as(finding, PooledLockEvidence).certainty.startswith("certain: ")
    assert "belongs to no client" in finding.summary
    assert "transaction mode" in finding.summary


def test_it_names_the_client_the_backend_serves_now() -> None:
    pool = pooler("transaction", server(link="0xc2"), clients=(client(),))
    (finding,) = findings_for(pool, pooled_backend())
    linked = evidence_as(finding, PooledLockEvidence).linked_client
    assert linked is not None
    assert linked.application_name == "app-2"
    assert "now serving client 10.0.0.2:40000 (app-2)" in finding.summary


@pytest.mark.parametrize("mode", ["session", ""])
def test_a_session_pool_is_fine(mode: str) -> None:
    assert findings_for(pooler(mode), pooled_backend()) == []


def test_a_lock_on_a_backend_the_pooler_does_not_know_is_not_its_business() -> None:
    assert findings_for(pooler("transaction", server(pid=999)), pooled_backend()) == []


def test_the_same_pid_on_another_server_behind_the_pooler_does_not_match() -> None:
    other = server(local_port=POOLER_PORT + 1)
    assert findings_for(pooler("transaction", other), pooled_backend()) == []


def test_a_lock_inside_the_current_transaction_may_be_transaction_level_and_is_not_flagged() -> (
    None
):
    busy = pooled_backend(state="idle in transaction", xact_start=ago(5))
    assert findings_for(pooler(), busy, held_for=2) == []


def test_a_lock_once_seen_outside_any_transaction_is_a_session_lock_even_while_active() -> None:
    busy = pooled_backend(state="active", xact_start=ago(1), state_change=ago(1))
    (finding,) = findings_for(pooler(), busy, held_for=120, session_level=True)
    assert evidence_as(finding, LockEvidence).holders[0].pid == BACKEND_PID


def test_a_lock_older_than_the_current_transaction_proves_nothing_about_its_level() -> None:
    # A transaction lock taken again in each short transaction looks the same.
    busy = pooled_backend(state="active", xact_start=ago(1), state_change=ago(1))
    assert findings_for(pooler(), busy, held_for=120, session_level=False) == []
    assert findings_for(pooler(), busy, held_for=120) == []


def test_the_trackers_judgement_outweighs_an_idle_state_read_after_the_locks() -> None:
    # Idle now, but it went idle after the locks were read: the lock may have
    # been its last transaction's.
    assert findings_for(pooler(), pooled_backend(), session_level=False) == []


def test_without_a_pooler_view_nothing_is_said_about_pooling() -> None:
    snap = snapshot(held(42, BACKEND_PID, held_for=60), backends=[pooled_backend()])
    assert all(
        f.kind is not FindingKind.LOCK_POOLED_SESSION
        for f in detect_locks(snap, LockSettings(), NOW)
    )


def named_leader(*applications: str) -> LockSettings:
    allowed = AllowedHolders(applications=applications)
    return LockSettings(
        named=(NamedLock("nightly-leader", key(42), role=LockRole.LEADER, allowed=allowed),)
    )


def test_the_last_client_of_a_pooled_backend_is_not_judged_as_the_holder() -> None:
    # Seed 000 through pgbouncer: the scheduler took the leader lock, then a
    # web worker's transaction ran on the same backend and left its name there.
    session = pooled_backend(application_name="web-worker")
    snap = snapshot(held(42, BACKEND_PID, held_for=60), backends=[session])
    findings = detect_locks(snap, named_leader("scheduler-*"), NOW, pooler())
    assert [f.kind for f in findings] == [FindingKind.LOCK_POOLED_SESSION]
    (finding,) = findings
    assert "web-worker" not in finding.summary.split("now serving")[0].split("last client")[0]
    (holder,) = evidence_as(finding, LockEvidence).holders
    assert (holder.application_name, holder.client_addr, holder.query) == (None, None, None)
    assert holder.pooled is not None
    assert holder.pooled.last_client_application_name == "web-worker"
    assert holder.pooled.pool == "app/scheduler"
    assert not holder.pooled.inferred
    assert holder.pooled.note == (
        "pooled backend of pool app/scheduler; the client that took the lock is unknown; "
        "last client: web-worker from 127.0.0.1:51000"
    )


def test_a_direct_session_is_still_judged_by_its_name() -> None:
    session = pooled_backend(application_name="web-worker")
    snap = snapshot(held(42, BACKEND_PID, held_for=60), backends=[session])
    findings = detect_locks(snap, named_leader("scheduler-*"), NOW)
    (finding,) = findings
    assert finding.kind is FindingKind.LOCK_UNEXPECTED_HOLDER
    (holder,) = evidence_as(finding, LockEvidence).holders
    assert holder.application_name == "web-worker" and holder.pooled is None


def test_an_orphan_on_a_pooled_backend_names_the_pool_not_its_last_client() -> None:
    session = pooled_backend(application_name="lockwatch-doctor", state_change=ago(900))
    snap = snapshot(held(42, BACKEND_PID, held_for=900), backends=[session])
    (orphan,) = [
        f
        for f in detect_locks(snap, LockSettings(orphan_after=60), NOW, pooler())
        if f.kind is FindingKind.LOCK_ORPHANED
    ]
    assert f"held by pid {BACKEND_PID} (pooled backend of pool app/scheduler;" in orphan.summary


def session_lock(pid: int = BACKEND_PID) -> AdvisoryLock:
    return replace(held(42, pid, held_for=60), session_level=True)


def polls(*sessions: list[Backend]) -> tuple[dict[int, str], PoolMemory]:
    """infer_pooled over one poll per list of sessions, each holding key 42 (or 43...)."""
    memory = PoolMemory()
    inferred: dict[int, str] = {}
    for seen in sessions:
        snap = snapshot(*(session_lock(s.pid) for s in seen), backends=seen)
        inferred, memory = infer_pooled(snap, memory)
    return inferred, memory


def test_a_name_that_changes_under_a_session_lock_marks_the_backend_pooled() -> None:
    inferred, _ = polls([pooled_backend()], [pooled_backend(application_name="web-worker")])
    assert inferred == {
        BACKEND_PID: "its application_name changed from 'app-1' to 'web-worker' "
        "while it held a session lock"
    }


def test_a_name_that_stays_infers_nothing_and_a_new_backend_on_the_pid_starts_afresh() -> None:
    assert polls([pooled_backend()], [pooled_backend()])[0] == {}
    reborn = pooled_backend(application_name="web-worker", backend_start=ago(1))
    assert polls([pooled_backend()], [reborn])[0] == {}


def test_a_direct_session_from_the_poolers_address_is_never_inferred_pooled() -> None:
    """Only a backend's own history says it is pooled: another session from
    the pooler's host (a cron job, doctor, psql) keeps its name and is judged
    as itself."""
    other = replace(pooled_backend(), pid=5151, application_name="cron")
    inferred, memory = polls(
        [pooled_backend(), other],
        [pooled_backend(application_name="web-worker"), other],
        [pooled_backend(application_name="web-worker"), other],
    )
    assert set(inferred) == {BACKEND_PID}
    assert all(pid == BACKEND_PID for pid, _ in memory.pooled)


def test_with_the_console_read_show_servers_decides_and_no_guess_is_used() -> None:
    """A direct session that renamed itself under its lock looks pooled to a
    guess; pgbouncer's SHOW SERVERS does not list it, so it is not."""
    renamed = pooled_backend(application_name="web-worker")
    inferred, _ = polls([pooled_backend()], [renamed])
    assert inferred  # the guess, without a console
    snap = snapshot(session_lock(), backends=[renamed])
    other_server = server(pid=9999)  # the pool's real backend, holding nothing
    kinds = {
        f.kind
        for f in detect_locks(
            snap, LockSettings(), NOW, pooler("transaction", other_server), inferred=inferred
        )
    }
    assert FindingKind.LOCK_POOLED_SESSION not in kinds


def test_an_inferred_pooled_session_is_reported_with_the_evidence_marked_inferred() -> None:
    inferred, _ = polls([pooled_backend()], [pooled_backend(application_name="web-worker")])
    snap = snapshot(session_lock(), backends=[pooled_backend(application_name="web-worker")])
    (finding,) = [
        f
        for f in detect_locks(snap, named_leader("app-*"), NOW, None, inferred=inferred)
        if f.kind is FindingKind.LOCK_POOLED_SESSION
    ]
    evidence = evidence_as(finding, PooledLockEvidence)
    assert evidence.inferred == inferred[BACKEND_PID]
    assert evidence.certainty.startswith("likely, not certain")
    assert evidence.pool is None
    assert "(inferred: its application_name changed" in finding.summary


@given(
    st.lists(st.sampled_from(["idle", "active", "idle in transaction"]), min_size=1, max_size=20)
)
def test_a_direct_client_that_keeps_its_name_is_never_inferred_pooled(states: list[str]) -> None:
    sessions = [[pooled_backend(state=state)] for state in states]
    inferred, memory = polls(*sessions)
    assert inferred == {} and not memory.pooled


def unread_pool_findings(lock: AdvisoryLock, *, through_pooler: bool = False) -> list[Finding]:
    """A lock held by web-worker's backend, the pooler's console unread."""
    session = pooled_backend(application_name="web-worker", state_change=ago(900))
    settings = LockSettings(orphan_after=60, clients_through_pooler=not through_pooler)
    snap = snapshot(lock, backends=[session])
    return detect_locks(snap, settings, NOW, through_pooler=through_pooler)


@pytest.mark.parametrize("through_pooler", [False, True])
def test_a_session_lock_whose_pooling_cannot_be_told_names_no_client(
    through_pooler: bool,
) -> None:
    """Clients may come through a pooler lockwatch cannot read (told so, or
    lockwatch's own DSN goes through one): the backend's name may be the last
    client's of a pool, so the holder is the backend alone."""
    findings = unread_pool_findings(session_lock(), through_pooler=through_pooler)
    (orphan,) = [f for f in findings if f.kind is FindingKind.LOCK_ORPHANED]
    assert f"held by backend {BACKEND_PID}, client unknown" in orphan.summary
    assert "web-worker" not in orphan.summary
    (holder,) = evidence_as(orphan, LockEvidence).holders
    assert (holder.application_name, holder.client_addr) == (None, None)
    assert holder.pooled is not None and not holder.pooled.inferred
    assert holder.pooled.last_client_application_name == "web-worker"
    assert holder.pooled.note.startswith(f"backend {BACKEND_PID}, client unknown:")
    assert not [f for f in findings if f.kind is FindingKind.LOCK_POOLED_SESSION]


def test_a_transaction_lock_is_its_clients_even_where_clients_may_be_pooled() -> None:
    """A pooler lends a backend for a whole transaction: the client running
    the transaction that holds a transaction lock is the one that took it."""
    findings = unread_pool_findings(
        replace(held(42, BACKEND_PID, held_for=900), session_level=False)
    )
    assert findings
    for finding in findings:
        (holder,) = evidence_as(finding, LockEvidence).holders
        assert holder.application_name == "web-worker" and holder.pooled is None


def test_with_the_console_read_no_holder_is_left_unknown() -> None:
    session = pooled_backend(application_name="web-worker", state_change=ago(900))
    settings = LockSettings(orphan_after=60, clients_through_pooler=True)
    snap = snapshot(session_lock(), backends=[session])
    findings = detect_locks(snap, settings, NOW, pooler("transaction", server(BACKEND_PID + 1)))
    (orphan,) = [f for f in findings if f.kind is FindingKind.LOCK_ORPHANED]
    assert "web-worker" in orphan.summary, "SHOW SERVERS does not list it: a direct session"

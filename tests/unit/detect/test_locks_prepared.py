"""Locks held by a prepared (two-phase) transaction: no session, pid 0, held
until COMMIT PREPARED or ROLLBACK PREPARED, across restarts."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from lockwatch.detect.locks import detect_locks
from lockwatch.model.evidence import LockEvidence
from lockwatch.model.evidence.json_form import from_json, object_json
from lockwatch.model.findings import Finding, FindingKind, Severity
from lockwatch.model.lock_waits import PreparedXact
from lockwatch.model.locks import AdvisoryLock, Backend, LockKey
from lockwatch.publish.api.findings import findings_document
from lockwatch.sample.lock_rows import decode_locks
from lockwatch.settings.locks import LockRole, LockSettings, NamedLock
from lockwatch.settings.targets import Target
from lockwatch.state.target_view import TargetView
from tests.fixtures.evidence import evidence_as
from tests.fixtures.schema import assert_valid_findings
from tests.fixtures.snapshots import (
    DB,
    NOW,
    TARGET,
    ago,
    backend,
    held,
    lock_arrays,
    snapshot,
    waiting,
)

XACT = PreparedXact(753, "nightly-7", "app", DB, ago(900), 900.0)


def prepared_lock(key: int = 42, held_for: float = 900.0) -> AdvisoryLock:
    return replace(held(key, 0, held_for=held_for), prepared=XACT)


def findings(
    settings: LockSettings, *locks: AdvisoryLock, backends: Iterable[Backend] = ()
) -> dict[FindingKind, Finding]:
    snap = snapshot(*locks, backends=backends)
    return {f.kind: f for f in detect_locks(snap, settings, NOW)}


def test_a_prepared_transactions_lock_is_a_critical_orphan_named_by_its_gid() -> None:
    found = findings(LockSettings(max_hold=3600, orphan_after=600), prepared_lock())
    orphan = found[FindingKind.LOCK_ORPHANED]
    assert orphan.severity is Severity.CRITICAL
    assert "prepared transaction 'nightly-7' (owner app)" in orphan.summary
    assert "ROLLBACK PREPARED" in orphan.summary
    assert orphan.since == ago(900 - 600)
    (holder,) = evidence_as(orphan, LockEvidence).holders
    assert holder.pid == 0
    assert holder.prepared is not None
    assert (holder.prepared.gid, holder.prepared.owner, holder.prepared.transaction) == (
        "nightly-7",
        "app",
        753,
    )
    assert FindingKind.LOCK_HELD_TOO_LONG not in found


def test_a_young_prepared_transaction_is_no_orphan_yet() -> None:
    assert findings(LockSettings(orphan_after=600), prepared_lock(held_for=60)) == {}


def test_a_leader_held_by_a_prepared_transaction_is_not_missing() -> None:
    leader = NamedLock("leader", LockKey.bigint(43), role=LockRole.LEADER)
    found = findings(LockSettings(named=(leader,)), prepared_lock(43))
    assert FindingKind.LEADER_LOCK_MISSING not in found


def test_its_waiters_are_a_convoy_behind_it() -> None:
    queued = [waiting(42, pid, waited_for=30) for pid in (101, 102)]
    sessions = [backend(pid, waits_on=[0]) for pid in (101, 102)]
    found = findings(LockSettings(), prepared_lock(), *queued, backends=sessions)
    assert "prepared" in found[FindingKind.LOCK_CONVOY].summary


def test_its_evidence_is_valid_json_and_reads_back() -> None:
    found = findings(LockSettings(orphan_after=600), prepared_lock())
    orphan = found[FindingKind.LOCK_ORPHANED]
    evidence = evidence_as(orphan, LockEvidence)
    assert from_json(LockEvidence, object_json(evidence)) == evidence
    document = findings_document(
        [TargetView(Target(TARGET, "postgresql://db/app"), findings=(orphan,))]
    )
    assert_valid_findings(document)


def test_the_sampler_names_a_lock_with_no_pid_by_its_prepared_transaction() -> None:
    arrays = lock_arrays([(None, 0, 42, 0), (101, 0, 42, 4)], prepared=["1/2"])
    sessions = {101: backend(101, waits_on=[0])}
    decoded = decode_locks(arrays, sessions, prepared={"1/2": XACT})
    holder, waiter = decoded.values()
    assert (holder.pid, holder.prepared, holder.database, holder.granted) == (0, XACT, DB, True)
    assert (waiter.pid, waiter.prepared, waiter.granted) == (101, None, False)
    # Its transaction ended between the two reads: the lock went with it.
    assert [lock.pid for lock in decode_locks(arrays, sessions).values()] == [101]

"""Locks a queue library holds on purpose (a running job's, a live process's),
as its preset names them: never held too long nor orphaned while their row
says so, named by their library in the findings they can still raise (a
convoy on them), and a named lock in the config wins over them. The good_job
keys are computed from its published formula (and checked against
PostgreSQL's in tests/integration/test_schema_presets.py)."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from lockwatch.detect.locks import detect_locks
from lockwatch.model.catalogue import KnownLock, Purpose
from lockwatch.model.findings import FindingKind, Subject
from lockwatch.model.locks import AdvisoryLock, Backend, LockKey
from lockwatch.settings.locks import LockSettings, NamedLock
from tests.fixtures.snapshots import DB, NOW, backend, good_job_key, held, snapshot, waiting

DEFAULTS = LockSettings()  # max_hold 300 s, orphan_after 600 s


JOB = str(uuid.UUID(int=7))
JOB_KEY = good_job_key("good_jobs", JOB)
ON_PURPOSE = {(DB, JOB_KEY): KnownLock("good_job", f"good_job job {JOB}", Purpose.JOB)}


def idle_holder(k: LockKey, pid: int = 10) -> tuple[AdvisoryLock, Backend]:
    """A worker's session holding ``k`` for an hour, idle all along (the job
    runs in Ruby, not in SQL)."""
    return (held(k, pid, held_for=3600.0), backend(pid, "good_job", state="idle", idle_for=3600.0))


def test_a_running_jobs_lock_held_for_an_hour_by_an_idle_session_raises_nothing() -> None:
    lock, session = idle_holder(JOB_KEY)
    snap = snapshot(lock, backends=[session])
    judged_alone = {f.kind for f in detect_locks(snap, DEFAULTS, NOW)}
    assert judged_alone == {FindingKind.LOCK_HELD_TOO_LONG, FindingKind.LOCK_ORPHANED}
    assert detect_locks(snap, DEFAULTS, NOW, held=ON_PURPOSE) == []


def test_a_lock_whose_job_is_not_running_is_judged_as_any_other() -> None:
    other = good_job_key("good_jobs", str(uuid.UUID(int=8)))  # finished: not listed
    lock, session = idle_holder(other)
    snap = snapshot(lock, backends=[session])
    kinds = {f.kind for f in detect_locks(snap, DEFAULTS, NOW, held=ON_PURPOSE)}
    assert FindingKind.LOCK_ORPHANED in kinds


def test_a_convoy_on_a_job_lock_is_still_a_finding_named_by_its_library() -> None:
    lock, session = idle_holder(JOB_KEY)
    snap = snapshot(
        lock,
        waiting(JOB_KEY, 11, waited_for=60.0),
        waiting(JOB_KEY, 12, waited_for=30.0),
        backends=[session, backend(11), backend(12)],
    )
    [finding] = detect_locks(snap, DEFAULTS, NOW, held=ON_PURPOSE)
    assert finding.kind is FindingKind.LOCK_CONVOY
    assert finding.subject == Subject(DB, f"good_job job {JOB}")


def test_a_named_lock_in_the_config_wins_over_the_librarys_rows() -> None:
    lock, session = idle_holder(JOB_KEY)
    snap = snapshot(lock, backends=[session])
    own = LockSettings(named=(NamedLock("mine", JOB_KEY),))
    subjects = {f.subject for f in detect_locks(snap, own, NOW, held=ON_PURPOSE)}
    assert subjects == {Subject(DB, "mine")}


@given(st.sampled_from([Purpose.JOB, Purpose.LIVENESS]), st.floats(0, 10 * 86400.0))
def test_nothing_held_on_purpose_is_ever_held_too_long_or_orphaned(
    purpose: Purpose, seconds: float
) -> None:
    snap = snapshot(
        held(JOB_KEY, 10, held_for=seconds),
        backends=[backend(10, state="idle", idle_for=seconds)],
    )
    on_purpose = {(DB, JOB_KEY): KnownLock("good_job", "good_job process x", purpose)}
    assert detect_locks(snap, DEFAULTS, NOW, held=on_purpose) == []

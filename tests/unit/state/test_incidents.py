"""The incident book: ids that stay put, timelines, impact, save and restore."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from lockwatch.detect.incidents import tell_incidents
from lockwatch.detect.locks import detect_locks
from lockwatch.model.findings import FindingKind
from lockwatch.model.incidents import (
    EventKind,
    Incident,
    IncidentChanges,
    IncidentState,
    Resolution,
    RootKind,
    incident_json,
    load_incident,
)
from lockwatch.model.locks import LockSnapshot
from lockwatch.settings.locks import LockSettings
from lockwatch.state.incident_history import FileHistory
from lockwatch.state.incidents import IncidentBook
from tests.fixtures.snapshots import NOW, TARGET, backend, held, held_by, snapshot, waiting
from tests.unit.detect.test_incidents import SEED_002, pooled
from tests.unit.detect.test_locks import seed_002_convoy

MINUTE = timedelta(minutes=1)


def poll(book: IncidentBook, snap: LockSnapshot, minutes: float) -> IncidentChanges:
    """One poll ``minutes`` after NOW, lockwatch's monotonic clock in step."""
    now = NOW + timedelta(minutes=minutes)
    findings = detect_locks(snap, SEED_002, NOW)
    return book.update(tell_incidents(findings, snap), now, 60.0 * minutes)


def convoy(waiters: int) -> LockSnapshot:
    base = seed_002_convoy()
    return replace(base, locks=tuple(base.locks[: 1 + waiters]))


def test_the_same_root_keeps_its_id_poll_after_poll_and_a_later_one_gets_another() -> None:
    book = IncidentBook(TARGET, reopen_grace=0)  # no flapping here: test_reopen.py
    first = poll(book, seed_002_convoy(), 0)
    (opened,) = first.opened
    again = poll(book, seed_002_convoy(), 1)
    assert again.opened == () and again.resolved == ()
    assert [i.id for i in again.active] == [opened.id]

    gone = poll(book, snapshot(), 2)
    (resolved,) = gone.resolved
    assert resolved.id == opened.id
    assert resolved.state is IncidentState.RESOLVED
    assert resolved.resolution is Resolution.RELEASED
    assert resolved.timeline[-1].event is EventKind.RESOLVED
    assert book.open == () and book.recent == (resolved,)

    (later,) = poll(book, seed_002_convoy(), 3).opened
    assert later.fingerprint == opened.fingerprint
    assert later.id != opened.id


def test_waiter_seconds_add_up_over_lockwatch_s_own_intervals() -> None:
    book = IncidentBook(TARGET)
    poll(book, convoy(5), 0)
    poll(book, convoy(5), 1)  # the 5 seen at 0 waited until 1
    (incident,) = poll(book, convoy(2), 3).active  # the 5 seen at 1 waited until 3
    assert incident.impact.waiter_seconds == 5 * 60 + 5 * 120
    assert incident.impact.max_waiters == 5
    assert incident.waiters == 2
    assert incident.impact.locks_held == 1
    counts = [e.value for e in incident.timeline if e.event is EventKind.WAITERS]
    assert counts == [5.0, 2.0]
    (resolved,) = poll(book, snapshot(), 4).resolved  # the 2 seen at 3 waited until 4
    assert resolved.impact.waiter_seconds == 5 * 60 + 5 * 120 + 2 * 60


def test_a_new_kind_joining_worsens_the_incident_and_goes_on_its_timeline() -> None:
    book = IncidentBook(TARGET)
    young = snapshot(
        held(42, 1234, held_for=30),
        *[waiting(42, 1301 + i, waited_for=25) for i in range(3)],
        backends=[backend(1234, "webhook-worker-1", idle_for=20)],
    )
    (opened,) = poll(book, young, 0).opened
    assert opened.kinds == (FindingKind.LOCK_CONVOY,)

    changes = poll(book, seed_002_convoy(), 1)
    (worse,) = changes.worsened
    assert worse.id == opened.id
    events = [e.event for e in worse.timeline]
    assert EventKind.BUDGET_PASSED in events
    assert EventKind.HOLDER_IDLE in events
    assert set(worse.kinds) >= {FindingKind.LOCK_HELD_TOO_LONG, FindingKind.LOCK_ORPHANED}


def test_a_restart_keeps_the_id_and_timeline_and_an_old_state_file_still_loads(
    tmp_path: Path,
) -> None:
    book = IncidentBook(TARGET)
    (opened,) = poll(book, seed_002_convoy(), 0).opened
    poll(book, convoy(2), 1)
    saved = json.loads(json.dumps(book.dump()))

    restarted = IncidentBook(TARGET)
    restarted.load(saved)
    (restored,) = restarted.open
    assert restored == book.open[0]
    (still,) = poll(restarted, seed_002_convoy(), 2).active
    assert still.id == opened.id
    assert still.timeline[: len(restored.timeline)] == restored.timeline

    old = IncidentBook(TARGET)
    old.load(None)
    old.load([{"incident": {"id": "x"}}, 7])
    assert old.open == ()


def resolved_incident(book: IncidentBook, start: float) -> Incident:
    poll(book, seed_002_convoy(), start)
    (incident,) = poll(book, snapshot(), start + 1).resolved
    return incident


def test_resolved_incidents_go_to_the_history_which_outlives_a_restart(tmp_path: Path) -> None:
    history = FileHistory(tmp_path, retention=14 * 86400, max_kept=2, clock=lambda: NOW)
    book = IncidentBook(TARGET, on_resolved=history.add, reopen_grace=0)  # three incidents
    first = resolved_incident(book, 0)
    assert history.get(first.id) == first
    second, third = resolved_incident(book, 5), resolved_incident(book, 10)

    reread = FileHistory(tmp_path, retention=14 * 86400, max_kept=2, clock=lambda: NOW)
    assert [i.id for i in reread.resolved()] == [third.id, second.id]
    restarted = IncidentBook(TARGET)
    restarted.recall([*reread.resolved(), replace(third, id="x", target="other")])
    assert restarted.recent == (third, second)
    assert reread.get(third.id) == third
    assert reread.resolved(since=third.resolved_at) == [third]


def test_the_history_forgets_what_is_past_its_retention(tmp_path: Path) -> None:
    later = NOW
    history = FileHistory(tmp_path, retention=600.0, clock=lambda: later)
    book = IncidentBook(TARGET, on_resolved=history.add)
    incident = resolved_incident(book, 0)
    assert history.resolved() == [incident]
    later = NOW + timedelta(minutes=12)
    resolved_incident(book, 13)  # a change prunes what is past the retention
    assert incident.id not in [i.id for i in history.resolved()]


def test_an_incident_s_json_reads_back_as_itself() -> None:
    book = IncidentBook(TARGET)
    incident = resolved_incident(book, 0)
    assert load_incident(json.loads(json.dumps(incident_json(incident)))) == incident
    assert load_incident({"id": 1}) is None


def test_the_holder_s_backend_lent_to_another_client_goes_on_the_timeline() -> None:
    book = IncidentBook(TARGET)
    locks = detect_locks(seed_002_convoy(), SEED_002, NOW)
    for minute, port in enumerate((40001, 40001, 40002)):
        findings = [*locks, pooled(locks[0], port)]
        groups = tell_incidents(findings, seed_002_convoy())
        (incident,) = book.update(groups, NOW + minute * MINUTE, minute * 60.0).active
    reused = [e for e in incident.timeline if e.event is EventKind.BACKEND_REUSED]
    assert [e.detail for e in reused] == ["the holder's backend now serves 10.0.0.9:40002 web"]
    assert incident.root.kind is RootKind.POOLED_BACKEND
    assert incident.next_step.cost is not None
    assert "the client linked to it at lockwatch's last look (10.0.0.9:40002 web)" in (
        incident.next_step.cost
    )


def orphan_of(pid: int) -> LockSnapshot:
    return snapshot(
        held(pid, pid, held_for=900), backends=[backend(pid, f"worker-{pid}", idle_for=800)]
    )


SCENES = (seed_002_convoy(), convoy(2), orphan_of(501), orphan_of(502), snapshot())


# No deadline: each example is up to eight polls, and a busy machine is no failure.
@settings(deadline=None)
@given(st.lists(st.lists(st.sampled_from(SCENES), max_size=3), min_size=1, max_size=8))
def test_any_run_of_polls_keeps_one_incident_per_root_with_a_steady_id(
    polls: list[list[LockSnapshot]],
) -> None:
    book = IncidentBook(TARGET)
    ids: dict[str, str] = {}  # fingerprint -> id while open
    for minute, scenes in enumerate(polls):
        merged = snapshot(
            *(lock for scene in scenes for lock in scene.locks),
            backends=[b for scene in scenes for b in scene.backends.values()],
        )
        findings = detect_locks(merged, SEED_002, NOW)
        groups = tell_incidents(findings, merged, book.finding_roots())
        changes = book.update(groups, NOW + minute * MINUTE, minute * 60.0)
        now_open = {i.fingerprint: i.id for i in changes.active}
        assert set(now_open) == {g.root.fingerprint for g in groups}
        assert sum(len(i.findings) for i in changes.active) == len(findings)
        for fingerprint, ident in now_open.items():
            assert ids.get(fingerprint, ident) == ident  # steady while open
        for incident in changes.active:
            moments = [event.at for event in incident.timeline]
            assert moments == sorted(moments)
        assert {i.fingerprint for i in changes.resolved} == set(ids) - set(now_open)
        assert {i.fingerprint for i in changes.opened} == set(now_open) - set(ids)
        ids = now_open
        restored = IncidentBook(TARGET)
        restored.load(json.loads(json.dumps(book.dump())))
        assert restored.open == book.open


def test_a_holders_locks_changing_order_never_resolve_its_incident() -> None:
    book = IncidentBook(TARGET)
    psql = backend(7023, "psql", idle_for=800)
    oldest_first = snapshot(*(held(k, 7023, held_for=900 - k) for k in range(150)), backends=[psql])
    newest_first = snapshot(*(held(k, 7023, held_for=750 + k) for k in range(150)), backends=[psql])
    seen = []
    for minute, snap in enumerate((oldest_first, newest_first, oldest_first)):
        findings = detect_locks(snap, LockSettings(max_hold=60.0), NOW)
        groups = tell_incidents(findings, snap, book.finding_roots())
        changes = book.update(groups, NOW + minute * MINUTE, minute * 60.0)
        assert changes.resolved == ()
        (incident,) = changes.active
        seen.append((incident.id, {f.subject.lock for f in incident.findings}))
    assert len({ident for ident, _ in seen}) == 1
    assert all(subjects == {held_by(7023).lock} for _, subjects in seen)

from __future__ import annotations

import doctest
import ipaddress
from typing import TypedDict, Unpack

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockwatch import text as text_module
from lockwatch.detect import key_groups, lock_holders
from lockwatch.detect.evidence import blocking_chain
from lockwatch.detect.locks import detect_locks
from lockwatch.model.evidence import LockEvidence, OverflowEvidence
from lockwatch.model.evidence.json_form import object_json, to_json
from lockwatch.model.findings import (
    MORE_HOLDERS_SUBJECT,
    Finding,
    FindingKind,
    Related,
    Severity,
    Subject,
    evidence_json,
)
from lockwatch.model.locks import LockKey, LockSnapshot
from lockwatch.settings.locks import AllowedHolders, LockRole, LockSettings, NamedLock
from tests.fixtures.evidence import evidence_as
from tests.fixtures.snapshots import (
    DB,
    NOW,
    TARGET,
    ago,
    backend,
    held,
    held_by,
    key,
    lock_keys,
    lock_snapshots,
    snapshot,
    waiting,
)

DEFAULTS = LockSettings()  # max_hold 300 s, orphan_after 600 s, convoy 2 waiters / 5 s

HELD = FindingKind.LOCK_HELD_TOO_LONG
CONVOY = FindingKind.LOCK_CONVOY
ORPHAN = FindingKind.LOCK_ORPHANED
STRANGER = FindingKind.LOCK_UNEXPECTED_HOLDER
LEADERLESS = FindingKind.LEADER_LOCK_MISSING


def kinds(findings: list[Finding]) -> list[FindingKind]:
    return [f.kind for f in findings]


def only(findings: list[Finding], kind: FindingKind) -> Finding:
    matching = [f for f in findings if f.kind is kind]
    assert len(matching) == 1, findings
    return matching[0]


def related_on(subject: Subject, *others: FindingKind) -> tuple[Related, ...]:
    """The related findings of a lock finding: the other kinds on its subject."""
    return tuple(Related(kind, TARGET, subject) for kind in others)


class NamedOptions(TypedDict, total=False):
    """What ``named`` passes on to NamedLock."""

    role: LockRole
    database: str | None
    max_hold: float | None
    orphan_after: float | None
    allowed: AllowedHolders
    ignore: bool


def named(name: str, k: int | tuple[int, int], **kwargs: Unpack[NamedOptions]) -> LockSettings:
    return LockSettings(named=(NamedLock(name, key(k), **kwargs),))


def test_the_module_doctests_pass() -> None:
    result = doctest.testmod(text_module)
    assert result.attempted > 0
    assert result.failed == 0


# --- lock_held_too_long ------------------------------------------------------


def test_it_fires_when_a_lock_is_held_just_longer_than_the_default_budget() -> None:
    snap = snapshot(held(42, 1234, held_for=300.5), backends=[backend(1234)])
    finding = only(detect_locks(snap, DEFAULTS, NOW), HELD)
    assert finding.severity is Severity.WARNING
    assert finding.target == TARGET
    assert finding.subject == held_by(1234)
    assert finding.since == ago(0.5)
    assert evidence_as(finding, LockEvidence).max_hold_seconds == 300.0
    assert evidence_as(finding, LockEvidence).holders[0].held_seconds == 300.5


def test_it_does_not_fire_at_exactly_the_budget() -> None:
    snap = snapshot(held(42, 1234, held_for=300), backends=[backend(1234)])
    assert detect_locks(snap, DEFAULTS, NOW) == []


def test_it_is_critical_when_someone_waits_on_the_long_held_lock() -> None:
    snap = snapshot(
        held(42, 1234, held_for=400),
        waiting(42, 1301, waited_for=1),
        backends=[backend(1234), backend(1301, waits_on=[1234])],
    )
    assert only(detect_locks(snap, DEFAULTS, NOW), HELD).severity is Severity.CRITICAL


def test_it_never_invents_a_hold_time_for_a_lock_it_has_not_dated() -> None:
    snap = snapshot(held(42, 1234, held_for=None), backends=[backend(1234)])
    assert detect_locks(snap, LockSettings(max_hold=0.0), NOW) == []


def test_a_first_sight_in_the_future_counts_as_zero_not_negative() -> None:
    snap = snapshot(held(42, 1234, held_for=-50), backends=[backend(1234)])
    settings_ = LockSettings(max_hold=-1.0)
    assert (
        evidence_as(only(detect_locks(snap, settings_, NOW), HELD), LockEvidence)
        .holders[0]
        .held_seconds
        == 0.0
    )


def test_a_named_budget_overrides_the_default_both_ways() -> None:
    short = named("webhook-delivery", 42, max_hold=60.0)
    long = named("nightly-report", 42, max_hold=3600.0)
    snap = snapshot(held(42, 1234, held_for=61), backends=[backend(1234)])
    finding = only(detect_locks(snap, short, NOW), HELD)
    assert finding.subject == Subject(DB, "webhook-delivery")
    assert evidence_as(finding, LockEvidence).name == "webhook-delivery"
    assert evidence_as(finding, LockEvidence).key == "42"
    assert evidence_as(finding, LockEvidence).max_hold_seconds == 60.0
    assert finding.summary.startswith("lock webhook-delivery (42) in app held 1m1s")

    # Still in the statement that took it (a session running others since is an orphan).
    snap = snapshot(held(42, 1234, held_for=1000), backends=[backend(1234, state_for=1000)])
    assert detect_locks(snap, long, NOW) == []


def test_a_leader_lock_held_for_days_is_not_held_too_long() -> None:
    leader = named("scheduler", 7, role=LockRole.LEADER)
    snap = snapshot(held(7, 50, held_for=3 * 86400), backends=[backend(50)])
    assert detect_locks(snap, leader, NOW) == []


def test_a_leader_lock_with_its_own_budget_is_held_too_long_past_it() -> None:
    leader = named("scheduler", 7, role=LockRole.LEADER, max_hold=3600.0)
    snap = snapshot(held(7, 50, held_for=3601), backends=[backend(50)])
    assert kinds(detect_locks(snap, leader, NOW)) == [HELD]


def test_shared_holders_give_one_finding_about_the_longest_holder_listing_all() -> None:
    snap = snapshot(
        held(42, 11, held_for=400, mode="ShareLock"),
        held(42, 12, held_for=900, mode="ShareLock"),
        held(42, 13, held_for=10, mode="ShareLock"),
        backends=[backend(11, state_for=400), backend(12, "reporter", state_for=900), backend(13)],
    )
    findings = detect_locks(snap, DEFAULTS, NOW)
    finding = only(findings, HELD)
    assert len(findings) == 1
    assert evidence_as(finding, LockEvidence).holder_pid == 12
    assert [h.pid for h in evidence_as(finding, LockEvidence).holders] == [11, 12, 13]
    assert {h.mode for h in evidence_as(finding, LockEvidence).holders} == {"ShareLock"}
    assert "by pid 12 (reporter from 10.0.0.5) and 1 more" in finding.summary
    assert finding.since == ago(900 - 300)


def test_a_holder_whose_session_was_not_seen_is_still_reported_by_pid() -> None:
    snap = snapshot(held(42, 4321, held_for=500))
    finding = only(detect_locks(snap, DEFAULTS, NOW), HELD)
    holder = evidence_as(finding, LockEvidence).holders[0]
    assert holder.pid == 4321
    assert holder.application_name is None
    assert "pid 4321" in finding.summary


# --- lock_convoy ----------------------------------------------------------------


def convoy(waits: list[float], *, wait_start_known: bool = True) -> LockSnapshot:
    return snapshot(
        held(42, 1234, held_for=10),
        *[
            waiting(42, 2000 + i, waited_for=w, wait_start_known=wait_start_known)
            for i, w in enumerate(waits)
        ],
        backends=[backend(1234, "webhook-worker-1")]
        + [
            backend(2000 + i, f"webhook-worker-{i + 2}", waits_on=[1234]) for i in range(len(waits))
        ],
    )


def test_a_convoy_fires_at_the_waiter_count_and_wait_thresholds() -> None:
    finding = only(detect_locks(convoy([5.0, 1.0]), DEFAULTS, NOW), CONVOY)
    assert finding.severity is Severity.CRITICAL
    assert finding.since == ago(5)
    assert evidence_as(finding, LockEvidence).waiter_count == 2
    assert evidence_as(finding, LockEvidence).longest_wait_seconds == 5.0
    assert [w.pid for w in evidence_as(finding, LockEvidence).waiters] == [2000, 2001]
    assert evidence_as(finding, LockEvidence).waiters[0].blocked_by == (1234,)
    assert finding.summary == (
        "2 sessions wait on lock 42 in app, longest 5s; holder pid 1234 (webhook-worker-1) active"
    )


def test_one_waiter_is_not_a_convoy() -> None:
    assert detect_locks(convoy([600.0]), DEFAULTS, NOW) == []


def test_waiters_that_just_arrived_are_not_a_convoy_yet() -> None:
    assert detect_locks(convoy([4.9, 4.9, 4.9]), DEFAULTS, NOW) == []


def test_without_wait_start_a_convoy_is_dated_by_first_sight() -> None:
    finding = only(detect_locks(convoy([30, 20], wait_start_known=False), DEFAULTS, NOW), CONVOY)
    assert finding.since == ago(30)
    assert evidence_as(finding, LockEvidence).longest_wait_seconds == 30.0


def test_the_next_in_line_taking_a_drained_convoys_key_is_no_convoy_of_its_own_yet() -> None:
    # webhook-worker-1 let go; worker-2 took 42 a second ago, and worker-3 and
    # -4 still wait, 9 s in all, most of it behind worker-1.
    def taken(held_for: float) -> LockSnapshot:
        return snapshot(
            held(42, 2000, held_for=held_for),
            waiting(42, 2001, waited_for=9),
            waiting(42, 2002, waited_for=8),
            backends=[
                backend(2000, "webhook-worker-2"),
                backend(2001, "webhook-worker-3", waits_on=[2000]),
                backend(2002, "webhook-worker-4", waits_on=[2000]),
            ],
        )

    assert detect_locks(taken(1.0), DEFAULTS, NOW) == []
    # Held past the convoy's wait with the others still queued: its convoy now.
    finding = only(detect_locks(taken(5.0), DEFAULTS, NOW), CONVOY)
    assert "holder pid 2000 (webhook-worker-2)" in finding.summary
    assert evidence_as(finding, LockEvidence).longest_wait_seconds == 9.0


def test_a_convoy_carries_the_chain_from_its_longest_waiter() -> None:
    finding = only(detect_locks(convoy([6, 9]), DEFAULTS, NOW), CONVOY)
    assert [step.pid for step in evidence_as(finding, LockEvidence).chain] == [2001, 1234]


# --- lock_orphaned ----------------------------------------------------------------


def test_an_idle_holder_past_orphan_after_is_an_orphan() -> None:
    snap = snapshot(
        held(42, 1234, held_for=10),  # lockwatch restarted: hold is young, idleness is not
        backends=[
            backend(
                1234,
                "dev-laptop",
                addr="192.168.1.4",
                idle_for=3 * 3600 + 2 * 60,
                query="SELECT pg_advisory_lock(42)",
            )
        ],
    )
    finding = only(detect_locks(snap, DEFAULTS, NOW), ORPHAN)
    assert finding.severity is Severity.WARNING
    assert finding.since == ago(3 * 3600 + 2 * 60 - 600)
    assert evidence_as(finding, LockEvidence).orphan_after_seconds == 600.0
    assert finding.summary == (
        "lock 42 in app held by pid 1234 (dev-laptop from 192.168.1.4), idle 3h2m "
        'since "SELECT pg_advisory_lock(42)"'
    )


def test_an_idle_holder_at_exactly_orphan_after_is_not_an_orphan() -> None:
    snap = snapshot(held(42, 1234, held_for=10), backends=[backend(1234, idle_for=600)])
    assert detect_locks(snap, DEFAULTS, NOW) == []


def test_an_active_holder_is_never_an_orphan() -> None:
    snap = snapshot(held(42, 1234, held_for=10), backends=[backend(1234, state_for=86400)])
    assert detect_locks(snap, DEFAULTS, NOW) == []


def test_idle_in_transaction_counts_as_idle_and_waiters_make_it_critical() -> None:
    snap = snapshot(
        held(42, 1234, held_for=10),
        waiting(42, 1301, waited_for=2),
        backends=[backend(1234, state="idle in transaction", idle_for=601), backend(1301)],
    )
    finding = only(detect_locks(snap, DEFAULTS, NOW), ORPHAN)
    assert finding.severity is Severity.CRITICAL
    assert "idle in transaction 10m1s" in finding.summary


def test_a_leader_is_only_orphaned_past_its_own_orphan_after() -> None:
    snap = snapshot(held(7, 50, held_for=10), backends=[backend(50, idle_for=86400)])
    assert detect_locks(snap, named("scheduler", 7, role=LockRole.LEADER), NOW) == []
    own = named("scheduler", 7, role=LockRole.LEADER, orphan_after=3600.0)
    assert kinds(detect_locks(snap, own, NOW)) == [ORPHAN]


def test_a_named_orphan_after_overrides_the_default() -> None:
    snap = snapshot(held(42, 1234, held_for=10), backends=[backend(1234, idle_for=61)])
    assert kinds(detect_locks(snap, named("sweep", 42, orphan_after=60.0), NOW)) == [ORPHAN]


# --- lock_unexpected_holder ------------------------------------------------------

PROD_ONLY = AllowedHolders(("retry-sweeper-*",), (ipaddress.ip_network("10.0.0.0/8"),))


def test_a_dev_server_holding_a_restricted_lock_is_an_unexpected_holder() -> None:
    snap = snapshot(
        held(99, 77, held_for=30),
        backends=[backend(77, "retry-sweeper-dev", addr="192.168.1.4")],
    )
    finding = only(detect_locks(snap, named("retry-sweep", 99, allowed=PROD_ONLY), NOW), STRANGER)
    assert finding.severity is Severity.CRITICAL
    assert finding.since == ago(30)
    assert evidence_as(finding, LockEvidence).allowed_applications == ("retry-sweeper-*",)
    assert evidence_as(finding, LockEvidence).allowed_addresses == ("10.0.0.0/8",)
    assert finding.summary == (
        "lock retry-sweep (99) in app held by pid 77 (retry-sweeper-dev from 192.168.1.4), "
        "not an allowed holder (allowed: retry-sweeper-*, 10.0.0.0/8)"
    )


def test_an_allowed_holder_is_not_unexpected() -> None:
    snap = snapshot(held(99, 77), backends=[backend(77, "retry-sweeper-1", addr="10.2.3.4")])
    assert detect_locks(snap, named("retry-sweep", 99, allowed=PROD_ONLY), NOW) == []


def test_an_unrestricted_named_lock_has_no_unexpected_holders() -> None:
    snap = snapshot(held(99, 77), backends=[backend(77, "anything", addr="192.168.1.4")])
    assert detect_locks(snap, named("retry-sweep", 99), NOW) == []


def test_a_local_socket_holder_is_allowed_only_when_local_is() -> None:
    snap = snapshot(held(99, 77), backends=[backend(77, "cron", addr=None)])
    local = AllowedHolders(local=True)
    remote = AllowedHolders(networks=(ipaddress.ip_network("10.0.0.0/8"),))
    assert detect_locks(snap, named("x", 99, allowed=local), NOW) == []
    finding = only(detect_locks(snap, named("x", 99, allowed=remote), NOW), STRANGER)
    assert "(cron from local socket)" in finding.summary


# --- leader_lock_missing ---------------------------------------------------------


def test_a_leader_lock_nobody_holds_is_missing() -> None:
    leader = named("scheduler", 7, role=LockRole.LEADER, database=DB)
    finding = only(detect_locks(snapshot(), leader, NOW), LEADERLESS)
    assert finding.severity is Severity.CRITICAL
    assert finding.since == NOW
    assert finding.subject == Subject(DB, "scheduler")
    assert evidence_as(finding, LockEvidence).holders == ()
    assert finding.summary == "leader lock scheduler (7) is held by nobody in app"


def test_a_leader_held_in_another_database_counts_only_when_no_database_is_named() -> None:
    snap = snapshot(held(7, 50, database="other"), backends=[backend(50, database="other")])
    anywhere = named("scheduler", 7, role=LockRole.LEADER)
    in_app = named("scheduler", 7, role=LockRole.LEADER, database=DB)
    assert detect_locks(snap, anywhere, NOW) == []
    finding = only(detect_locks(snap, in_app, NOW), LEADERLESS)
    assert finding.subject == Subject(DB, "scheduler")


def test_a_leader_missing_everywhere_has_no_database_and_lists_its_waiters() -> None:
    snap = snapshot(waiting(7, 51, waited_for=3), backends=[backend(51)])
    finding = only(detect_locks(snap, named("scheduler", 7, role=LockRole.LEADER), NOW), LEADERLESS)
    assert finding.subject == Subject(None, "scheduler")
    assert evidence_as(finding, LockEvidence).database is None
    assert [w.pid for w in evidence_as(finding, LockEvidence).waiters] == [51]
    assert "in any database; 1 waiting" in finding.summary


def test_a_mutex_nobody_holds_is_not_missing() -> None:
    assert detect_locks(snapshot(), named("sweep", 7), NOW) == []


# --- ignore lists ---------------------------------------------------------------


def liveness_lock_everywhere_wrong() -> LockSnapshot:
    return snapshot(
        held(123456789, 1234, held_for=30 * 86400),
        waiting(123456789, 1301, waited_for=3600),
        waiting(123456789, 1302, waited_for=3600),
        backends=[
            backend(1234, "good_job", idle_for=86400),
            backend(1301, waits_on=[1234]),
            backend(1302, waits_on=[1234]),
        ],
    )


def test_a_liveness_lock_on_the_ignore_list_produces_nothing() -> None:
    snap = liveness_lock_everywhere_wrong()
    assert len(detect_locks(snap, DEFAULTS, NOW)) == 3
    ignoring = LockSettings(ignore=(key(123456789),))
    assert detect_locks(snap, ignoring, NOW) == []


def test_a_named_lock_marked_ignore_produces_nothing() -> None:
    snap = liveness_lock_everywhere_wrong()
    assert detect_locks(snap, named("good_job-liveness", 123456789, ignore=True), NOW) == []


# --- the seeds -------------------------------------------------------------------


def seed_002_convoy() -> LockSnapshot:
    """One webhook worker holds lock 42 across an HTTP call to a blackholed
    server (idle, no SQL running); five workers queue behind it."""
    return snapshot(
        held(42, 1234, held_for=340),
        *[waiting(42, 1301 + i, waited_for=310 - 20 * i) for i in range(5)],
        backends=[
            backend(
                1234,
                "webhook-worker-1",
                addr="10.0.0.5",
                idle_for=330,
                query="SELECT pg_advisory_lock(42)",
            ),
            *[
                backend(1301 + i, f"webhook-worker-{i + 2}", waits_on=[1234], state_for=310)
                for i in range(5)
            ],
        ],
    )


def test_seed_002_is_one_linked_story_of_convoy_long_hold_and_orphan() -> None:
    settings_ = LockSettings(
        orphan_after=120.0, named=(NamedLock("webhook-delivery", key(42), max_hold=60.0),)
    )
    findings = detect_locks(seed_002_convoy(), settings_, NOW)
    assert kinds(findings) == [CONVOY, HELD, ORPHAN]
    assert {f.subject for f in findings} == {Subject(DB, "webhook-delivery")}
    assert all(f.severity is Severity.CRITICAL for f in findings)

    convoy_, held_, orphan = findings
    assert convoy_.related == related_on(Subject(DB, "webhook-delivery"), HELD, ORPHAN)
    assert held_.related == related_on(Subject(DB, "webhook-delivery"), CONVOY, ORPHAN)
    assert orphan.related == related_on(Subject(DB, "webhook-delivery"), CONVOY, HELD)

    assert held_.summary == (
        "lock webhook-delivery (42) in app held 5m40s by pid 1234 "
        "(webhook-worker-1 from 10.0.0.5), idle 5m30s; budget 1m; 5 waiting"
    )
    assert convoy_.summary == (
        "5 sessions wait on lock webhook-delivery (42) in app, longest 5m10s; "
        "holder pid 1234 (webhook-worker-1) idle 5m30s"
    )
    holder = evidence_as(convoy_, LockEvidence).holders[0]
    assert object_json(holder) == {
        "pid": 1234,
        "application_name": "webhook-worker-1",
        "client_addr": "10.0.0.5",
        "usename": "app",
        "state": "idle",
        "state_seconds": 330.0,
        "held_seconds": 340.0,
        "mode": "ExclusiveLock",
        "xact_seconds": None,
        "prepared": None,
        "pooled": None,
        "wait_event_type": None,
        "wait_event": None,
        "query": "SELECT pg_advisory_lock(42)",
        "blocked_by": [],
        "client_port": None,
        "client_hostname": None,
        "backend_start": to_json(seed_002_convoy().backends[1234].backend_start),
    }
    assert evidence_as(convoy_, LockEvidence).waiter_count == 5
    assert evidence_as(convoy_, LockEvidence).longest_wait_seconds == 310.0
    assert [s.pid for s in evidence_as(convoy_, LockEvidence).chain] == [1301, 1234]
    assert held_.since == ago(340 - 60)
    assert orphan.since == ago(330 - 120)


def test_the_evidence_of_every_kind_has_the_same_keys() -> None:
    settings_ = LockSettings(
        orphan_after=120.0,
        named=(
            NamedLock("webhook-delivery", key(42), max_hold=60.0, allowed=PROD_ONLY),
            NamedLock("scheduler", key(7), role=LockRole.LEADER),
        ),
    )
    findings = detect_locks(seed_002_convoy(), settings_, NOW)
    assert set(kinds(findings)) == {CONVOY, HELD, ORPHAN, STRANGER, LEADERLESS}
    assert len({frozenset(evidence_json(f)) for f in findings}) == 1


def test_seed_003_orphan_stranger_and_missing_leader() -> None:
    """Neon: a pooled connection dropped by its client keeps the retry-sweep lock
    for hours; a forgotten dev server won the day-generation leader lock; nobody
    holds the publisher leader lock."""
    settings_ = LockSettings(
        named=(
            NamedLock("retry-sweep", key(20250423)),
            NamedLock(
                "day-generation",
                key((1, 20250423)),
                role=LockRole.LEADER,
                allowed=AllowedHolders(("content-bot",), (ipaddress.ip_network("10.0.0.0/8"),)),
            ),
            NamedLock("publisher", key(77), role=LockRole.LEADER, database=DB),
        )
    )
    snap = snapshot(
        held(20250423, 301, held_for=4 * 3600),
        held((1, 20250423), 302, held_for=2 * 3600),
        backends=[
            backend(301, "content-bot", addr="10.0.3.7", idle_for=4 * 3600, query="SELECT 1"),
            backend(302, "content-bot", addr="192.168.1.4", state_for=3),
        ],
    )
    findings = detect_locks(snap, settings_, NOW)
    assert [(f.kind, f.subject.lock) for f in findings] == [
        (LEADERLESS, "publisher"),
        (HELD, "retry-sweep"),
        (ORPHAN, "retry-sweep"),
        (STRANGER, "day-generation"),
    ]
    stranger = only(findings, STRANGER)
    assert evidence_as(stranger, LockEvidence).key == "1,20250423"
    assert evidence_as(stranger, LockEvidence).holder_pid == 302
    assert only(findings, ORPHAN).related == related_on(Subject(DB, "retry-sweep"), HELD)


# --- chains ------------------------------------------------------------------------


def test_a_holder_that_itself_waits_shows_the_whole_chain() -> None:
    """Waiters on 42 wait for pid 1234, which waits for pid 999 (say, on a row lock)."""
    snap = snapshot(
        held(42, 1234, held_for=400),
        waiting(42, 1301, waited_for=20),
        waiting(42, 1302, waited_for=50),
        backends=[
            backend(1234, "webhook-worker-1", waits_on=[999]),
            backend(999, "migration", state="idle in transaction", state_for=900),
            backend(1301, waits_on=[1234]),
            backend(1302, waits_on=[1234]),
        ],
    )
    findings = detect_locks(snap, DEFAULTS, NOW)
    assert kinds(findings) == [CONVOY, HELD]
    for finding in findings:
        chain = evidence_as(finding, LockEvidence).chain
        assert [s.pid for s in chain] == [1302, 1234, 999]
        assert chain[2].application_name == "migration"
        assert chain[2].state_seconds == 900.0
        assert not any(s.cycle for s in chain)
    assert "itself waiting on pid 999" in only(findings, CONVOY).summary


def test_a_waiting_holder_without_waiters_charts_its_own_chain() -> None:
    snap = snapshot(
        held(42, 1234, held_for=400),
        backends=[backend(1234, waits_on=[999]), backend(999, "migration")],
    )
    chain = evidence_as(only(detect_locks(snap, DEFAULTS, NOW), HELD), LockEvidence).chain
    assert [s.pid for s in chain] == [1234, 999]


def test_a_blocking_cycle_is_marked_and_ends_the_chain() -> None:
    snap = snapshot(backends=[backend(1, waits_on=[2]), backend(2, waits_on=[1])])
    chain = blocking_chain(snap, 1, NOW)
    assert [(s.pid, s.cycle) for s in chain] == [(1, False), (2, False), (1, True)]


def test_a_chain_is_cut_at_its_depth_cap() -> None:
    snap = snapshot(backends=[backend(i, waits_on=[i + 1]) for i in range(1, 50)])
    chain = blocking_chain(snap, 1, NOW, max_depth=4)
    assert [s.pid for s in chain] == [1, 2, 3, 4]
    assert chain[-1].blocked_by == (5,)


def test_a_chain_ends_at_a_blocker_lockwatch_did_not_see() -> None:
    snap = snapshot(backends=[backend(1, waits_on=[404])])
    chain = blocking_chain(snap, 1, NOW)
    assert [s.pid for s in chain] == [1, 404]
    assert chain[1].state is None


def test_a_chain_prefers_a_blocker_it_knows() -> None:
    snap = snapshot(backends=[backend(1, waits_on=[404, 2]), backend(2, "known")])
    assert [s.pid for s in blocking_chain(snap, 1, NOW)] == [1, 2]


# --- hostile client values -------------------------------------------------------------


def test_client_values_cannot_break_the_summary_line_but_stay_raw_in_evidence() -> None:
    app = 'evil\napp\x1b[31m "<b>'
    query = "SELECT pg_advisory_lock(42);\n-- " + "x" * 500
    snap = snapshot(
        held(42, 1234, held_for=10),
        backends=[backend(1234, app, idle_for=700, query=query)],
    )
    finding = only(detect_locks(snap, DEFAULTS, NOW), ORPHAN)
    assert len(finding.summary.splitlines()) == 1
    assert "\x1b" not in finding.summary
    assert '(evil app [31m "<b> from 10.0.0.5)' in finding.summary
    assert evidence_as(finding, LockEvidence).holders[0].application_name == app
    stored = evidence_as(finding, LockEvidence).holders[0].query
    assert stored == query[:200] + "…"
    assert 'since "SELECT pg_advisory_lock(42); -- xxx' in finding.summary
    assert len(finding.summary) < 250


# --- order ---------------------------------------------------------------------------


def test_findings_come_sorted_by_kind_database_and_key() -> None:
    snap = snapshot(
        held(9, 1, held_for=400, database="zeta"),
        held(10, 2, held_for=400),
        held(9, 3, held_for=400),
        held((1, 2), 4, held_for=400),
        backends=[backend(1, idle_for=700)],
    )
    findings = detect_locks(snap, DEFAULTS, NOW)
    # About their holders, ordered by the key of each one's longest hold.
    assert [(f.kind, f.subject, evidence_as(f, LockEvidence).key) for f in findings] == [
        (HELD, Subject(DB, "pid 3"), "9"),  # a session not seen: its pid alone
        (HELD, Subject(DB, "pid 2"), "10"),
        (HELD, Subject(DB, "pid 4"), "1,2"),
        (HELD, held_by(1, "zeta"), "9"),
        (ORPHAN, held_by(1, "zeta"), "9"),
    ]


# --- properties ----------------------------------------------------------------------

fast = settings(max_examples=150, deadline=None)


@st.composite
def lock_settings(draw: st.DrawFn, keys: list[LockKey]) -> LockSettings:
    """Small budgets so that findings are frequent, some keys named, restricted,
    leaders or ignored."""
    named_locks = []
    for i, k in enumerate(draw(st.lists(st.sampled_from(keys), unique=True)) if keys else []):
        named_locks.append(
            NamedLock(
                f"lock-{i}",
                k,
                role=draw(st.sampled_from(LockRole)),
                database=draw(st.sampled_from((None, DB))),
                max_hold=draw(st.none() | st.floats(0, 1000)),
                orphan_after=draw(st.none() | st.floats(0, 1000)),
                allowed=draw(st.sampled_from((AllowedHolders(), PROD_ONLY))),
                ignore=draw(st.booleans()),
            )
        )
    return LockSettings(
        max_hold=draw(st.floats(0, 1000)),
        orphan_after=draw(st.floats(0, 1000)),
        convoy_waiters=draw(st.integers(1, 3)),
        convoy_wait=draw(st.floats(0, 100)),
        ignore=tuple(draw(st.lists(st.sampled_from(keys), unique=True))) if keys else (),
        named=tuple(named_locks),
    )


@st.composite
def snapshots_with_settings(draw: st.DrawFn) -> tuple[LockSnapshot, LockSettings]:
    snap = draw(lock_snapshots())
    keys = sorted({lock.key for lock in snap.locks} | {draw(lock_keys)})
    return snap, draw(lock_settings(keys))


@fast
@given(lock_snapshots(max_age=299.0, waiters=False, states=("active",)))
def test_young_holds_by_active_sessions_without_waiters_give_nothing(snap: LockSnapshot) -> None:
    assert detect_locks(snap, DEFAULTS, NOW) == []


@fast
@given(snapshots_with_settings())
def test_findings_are_well_formed_for_any_snapshot(
    case: tuple[LockSnapshot, LockSettings],
) -> None:
    snap, settings_ = case
    findings = detect_locks(snap, settings_, NOW)
    assert findings == detect_locks(snap, settings_, NOW)

    identities = [(f.kind, f.subject) for f in findings]
    assert len(identities) == len(set(identities))
    for finding in findings:
        assert finding.severity in (Severity.CRITICAL, Severity.WARNING)
        assert finding.target == TARGET
        assert len(finding.summary.splitlines()) == 1
        assert finding.summary.isprintable()
        assert finding.since <= NOW
        assert all(r.target == finding.target for r in finding.related)
        assert all(r.subject == finding.subject for r in finding.related)
        assert finding.kind not in {r.kind for r in finding.related}


@st.composite
def snapshots_near_budgets(draw: st.DrawFn) -> tuple[LockSnapshot, LockSettings]:
    """Holds, waits and idle times on both sides of the budgets, often with
    no key named or ignored (a named key is always checked in full)."""
    snap = draw(lock_snapshots(max_age=1500.0))
    if draw(st.booleans()):
        keys = sorted({lock.key for lock in snap.locks} | {draw(lock_keys)})
        return snap, draw(lock_settings(keys))
    budgets = st.floats(0, 1500)
    return snap, LockSettings(
        max_hold=draw(budgets),
        orphan_after=draw(budgets),
        convoy_waiters=draw(st.integers(1, 3)),
        convoy_wait=draw(st.floats(0, 100)),
    )


@fast
@given(snapshots_near_budgets())
def test_passing_over_keys_that_cannot_fire_changes_no_finding(
    case: tuple[LockSnapshot, LockSettings],
) -> None:
    snap, settings_ = case
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(key_groups, "worth_checking", lambda snapshot, *_: list(snapshot.locks))
        every_key = detect_locks(snap, settings_, NOW)
    assert detect_locks(snap, settings_, NOW) == every_key


@fast
@given(snapshots_with_settings())
def test_ignored_keys_never_appear_in_findings(case: tuple[LockSnapshot, LockSettings]) -> None:
    snap, settings_ = case
    for finding in detect_locks(snap, settings_, NOW):
        database = evidence_as(finding, LockEvidence).database
        k = LockKey.parse(evidence_as(finding, LockEvidence).key)
        if finding.kind is LEADERLESS:
            assert settings_.named_lock(database or DB, k) is not None
            assert not any(n.ignore for n in settings_.named if n.name == finding.subject.lock)
        else:
            assert database is not None  # only a leader lock may be meant in every database
            assert not settings_.ignored(database, k)


def test_every_holder_is_told_on_its_own_and_named_keys_keep_their_own_finding() -> None:
    count = 150
    # One idle session per key, each past orphan_after; the last key is named.
    locks = [held(key_value, 1000 + key_value, held_for=900) for key_value in range(1, count + 1)]
    sessions = [backend(1000 + key_value, idle_for=900) for key_value in range(1, count + 1)]
    named = NamedLock("nightly", LockKey.bigint(count))
    findings = detect_locks(
        snapshot(*locks, backends=sessions), LockSettings(max_hold=3600, named=(named,)), NOW
    )

    orphans = [f for f in findings if f.kind is FindingKind.LOCK_ORPHANED]
    assert len(orphans) == count == len(findings)
    assert Subject(DB, "nightly") in {f.subject for f in orphans}, "a named key keeps its own"
    # Every other session is the subject of its own finding: none hides behind another.
    about = {f.subject for f in orphans} - {Subject(DB, "nightly")}
    assert about == {held_by(1000 + k) for k in range(1, count)}
    assert all(evidence_as(f, LockEvidence).held_keys == 1 for f in orphans)


def test_a_holder_of_thousands_of_keys_is_one_finding_counting_them() -> None:
    locks = [held(k, 1001, held_for=900 + (k == 77)) for k in range(1, 5001)]
    findings = detect_locks(
        snapshot(*locks, backends=[backend(1001)]),
        LockSettings(max_hold=60, orphan_after=86400),
        NOW,
    )

    (finding,) = findings
    facts = evidence_as(finding, LockEvidence)
    assert (finding.kind, finding.subject) == (HELD, held_by(1001))
    assert (facts.held_keys, facts.key) == (5000, "77"), "its longest hold's facts"
    assert facts.first_keys == tuple(f"{DB}/{k}" for k in range(1, 6))
    assert finding.summary == (
        "5000 locks (1, 2, 3, 4, 5, …) with lock_held_too_long; the longest: lock 77 in app "
        "held 15m1s by pid 1001 (worker from 10.0.0.5), active; budget 1m"
    )


def test_past_the_holder_bound_the_rest_are_counted_in_one_finding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lock_holders, "HOLDERS_PER_KIND", 3)
    # Session 1001 holds 10 keys, sessions 1002..1006 one each, all held too long.
    locks = [held(k, 1001, held_for=900) for k in range(1, 11)]
    locks += [held(10 + n, 1001 + n, held_for=900) for n in range(1, 6)]
    sessions = [backend(1001 + n) for n in range(6)]
    findings = detect_locks(
        snapshot(*locks, backends=sessions), LockSettings(max_hold=60, orphan_after=3600), NOW
    )

    held_long = [f for f in findings if f.kind is HELD]
    per_holder = [f for f in held_long if (f.subject.lock or "").startswith("pid ")]
    (beyond,) = [f for f in held_long if f.subject.lock == MORE_HOLDERS_SUBJECT]
    assert len(per_holder) == 3
    # The session with the most locks first: its own count, never the others'.
    assert [f.subject for f in per_holder] == [held_by(1001), held_by(1002), held_by(1003)]
    assert evidence_as(per_holder[0], LockEvidence).held_keys == 10
    assert beyond.summary.startswith("and 3 more sessions hold advisory locks")
    assert evidence_as(beyond, OverflowEvidence).count == 3


def test_a_key_turning_critical_changes_no_subject_and_makes_its_holders_finding_critical() -> None:
    count = 101
    locks = [held(key_value, 1000, held_for=900) for key_value in range(1, count + 1)]
    settings_ = LockSettings(max_hold=60, orphan_after=3600)
    quiet = detect_locks(snapshot(*locks, backends=[backend(1000)]), settings_, NOW)
    # A session now waits on the last key: its finding turns critical.
    queued = waiting(count, 2000, waited_for=1)
    busy = detect_locks(
        snapshot(*locks, queued, backends=[backend(1000), backend(2000)]), settings_, NOW
    )

    def subjects(findings: list[Finding]) -> set[Subject]:
        return {f.subject for f in findings if f.kind is HELD}

    assert subjects(busy) == subjects(quiet) == {held_by(1000)}
    (told,) = [f for f in busy if f.kind is HELD]
    assert told.severity is Severity.CRITICAL

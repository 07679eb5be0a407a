from __future__ import annotations

import json
from datetime import timedelta

from lockwatch.model.findings import Finding, FindingKind, Severity, Subject
from lockwatch.model.locks import LockKey, LockSnapshot
from lockwatch.model.views import TargetStatus
from lockwatch.publish.api.encode import render_json
from lockwatch.publish.api.findings import findings_document
from lockwatch.publish.api.locks import locks_document
from lockwatch.settings.locks import LockSettings, NamedLock
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.target_view import TargetView
from tests.fixtures.evidence import holder, lock_evidence
from tests.fixtures.schema import assert_valid_findings
from tests.fixtures.snapshots import NOW, TARGET, ago, backend, held, snapshot, waiting


def view_of(
    snap: LockSnapshot | None,
    locks: LockSettings | None = None,
    findings: tuple[Finding, ...] = (),
    error: str | None = None,
    name: str = TARGET,
) -> TargetView:
    return TargetView(
        target=Target(
            name=name, dsn="postgresql://mon@127.0.0.1/app", locks=locks or LockSettings()
        ),
        status=TargetStatus(target=name, checked_at=NOW, snapshot=snap, error=error),
        findings=findings,
    )


def finding(severity: Severity, age: float, lock: str = "42", target: str = TARGET) -> Finding:
    return Finding(
        kind=FindingKind.LOCK_HELD_TOO_LONG,
        target=target,
        subject=Subject(database="app", lock=lock),
        severity=severity,
        since=ago(age),
        summary=f"lock {lock} held for {age:.0f} s",
        evidence=lock_evidence(lock, holder_pid=1234, holders=(holder(1234, held_seconds=age),)),
    )


def strict_round_trip(document: dict[str, object]) -> object:
    """Parses the served bytes the way a strict client would."""
    return json.loads(render_json(document).decode("utf-8", errors="strict"))


def test_findings_come_critical_first_then_oldest_first() -> None:
    board = Board()
    board.publish(view_of(snapshot(), findings=(finding(Severity.WARNING, 600, "a"),)))
    board.publish(
        view_of(
            snapshot(),
            findings=(
                finding(Severity.INFO, 900, "b", "other"),
                finding(Severity.CRITICAL, 10, "c", "other"),
                finding(Severity.CRITICAL, 20, "d", "other"),
            ),
            name="other",
        )
    )

    document = findings_document(board)

    assert [f["subject"]["lock"] for f in document["findings"]] == ["d", "c", "a", "b"]
    first = document["findings"][0]
    assert first == {
        "kind": "lock_held_too_long",
        "target": "other",
        "subject": {"database": "app", "lock": "d", "queue": None, "job": None, "source": None},
        "severity": "critical",
        "since": (NOW - timedelta(seconds=20)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "summary": "lock d held for 20 s",
        "evidence": {
            "key": "d",
            "name": None,
            "role": None,
            "database": "app",
            "holder_pid": 1234,
            "holders": [
                {
                    "pid": 1234,
                    "application_name": "webhook-worker-1",
                    "client_addr": "10.0.0.5",
                    "state": "idle",
                    "state_seconds": 330.0,
                    "wait_event_type": None,
                    "wait_event": None,
                    "query": "SELECT pg_advisory_lock(42)",
                    "blocked_by": [],
                    "client_port": None,
                    "client_hostname": None,
                    "usename": "app",
                    "held_seconds": 20,
                    "mode": "ExclusiveLock",
                    "xact_seconds": None,
                    "prepared": None,
                    "backend_start": None,
                    "pooled": None,
                }
            ],
            "waiters": [],
            "waiter_count": 0,
            "longest_wait_seconds": None,
            "max_hold_seconds": 300.0,
            "orphan_after_seconds": 600.0,
            "allowed_applications": [],
            "allowed_addresses": [],
            "chain": [],
            "history": None,
            "orphan_lifetime": None,
            "held_keys": 1,
            "first_keys": [],
            "related": [],
        },
        "incident": None,  # the views were not told as incidents
    }
    assert first["since"].endswith("Z")
    assert strict_round_trip(document) == document
    assert_valid_findings(document)


def test_findings_accept_views_as_well_as_a_board() -> None:
    views = [view_of(snapshot(), findings=(finding(Severity.WARNING, 5),))]

    document = findings_document(views)
    assert len(document["findings"]) == 1
    assert_valid_findings(document)


def test_locks_show_holders_and_waiters_with_their_sessions() -> None:
    locks = LockSettings(
        named=(NamedLock("webhooks", LockKey.bigint(42)),), ignore=(LockKey.bigint(9),)
    )
    snap = snapshot(
        held(42, 1234, held_for=340),
        waiting(42, 1301, waited_for=310),
        held((7, 13), 1400, held_for=None),
        held(9, 1500, held_for=5),
        backends=[
            backend(1234, "webhook-worker-1", idle_for=330, query="SELECT pg_advisory_lock(42)"),
            backend(1301, "webhook-worker-2", waits_on=[1234]),
        ],
    )

    document = locks_document([view_of(snap, locks)], NOW)

    (entry,) = document["targets"]
    assert entry["target"] == TARGET
    assert entry["up"] is True
    assert entry["error"] is None
    assert entry["checked_at"] == NOW.strftime("%Y-%m-%dT%H:%M:%SZ")
    by_lock = {lock["lock"]: lock for lock in entry["locks"]}
    assert set(by_lock) == {"webhooks", "7,13", "9"}
    webhooks = by_lock["webhooks"]
    assert webhooks["key"] == "42"
    assert webhooks["named"] is True
    assert webhooks["ignored"] is False
    assert webhooks["mode"] == "ExclusiveLock"
    assert webhooks["hold_seconds"] == 340
    assert webhooks["waiter_count"] == 1
    assert webhooks["longest_wait_seconds"] == 310
    assert webhooks["holders"] == [
        {
            "pid": 1234,
            "application_name": "webhook-worker-1",
            "client_addr": "10.0.0.5",
            "client_port": None,
            "usename": "app",
            "state": "idle",
            "state_seconds": 330,
            "held_seconds": 340,
            "query": "SELECT pg_advisory_lock(42)",
        }
    ]
    assert webhooks["waiters"] == [
        {
            "pid": 1301,
            "application_name": "webhook-worker-2",
            "client_addr": "10.0.0.5",
            "client_port": None,
            "state": "active",
            "wait_seconds": 310,
            "blocked_by": [1234],
        }
    ]
    assert by_lock["9"]["ignored"] is True
    unseen = by_lock["7,13"]
    assert unseen["named"] is False
    assert unseen["hold_seconds"] is None
    assert unseen["holders"][0]["application_name"] is None


def test_a_target_that_never_polled_or_failed_has_no_locks() -> None:
    never = TargetView(target=Target(name="fresh", dsn=""))
    failed = view_of(None, error="connection refused by 127.0.0.1:6432", name="down")

    document = locks_document([never, failed], NOW)

    assert document["targets"] == [
        {
            "target": "fresh",
            "up": False,
            "error": None,
            "checked_at": None,
            "locks": [],
            "history": [],
            "lock_trees": [],
        },
        {
            "target": "down",
            "up": False,
            "error": "connection refused by 127.0.0.1:6432",
            "checked_at": NOW.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "locks": [],
            "history": [],
            "lock_trees": [],
        },
    ]


def test_lone_surrogates_and_non_finite_numbers_still_give_valid_json() -> None:
    snap = snapshot(
        held(42, 1234, held_for=10, database="pay\udcffments"),
        backends=[backend(1234, "app\udc80", query="SELECT '\ud800'")],
    )
    hostile = Finding(
        kind=FindingKind.LOCK_ORPHANED,
        target=TARGET,
        subject=Subject(database="pay\udcffments", lock="42"),
        severity=Severity.WARNING,
        since=NOW,
        summary="held by app\udc80",
        evidence=lock_evidence(
            "42",
            holders=(holder(1234, query="\udcfe", blocked_by=(1, 2)),),
            longest_wait_seconds=float("nan"),
        ),
    )
    view = view_of(snap, findings=(hostile,))

    locks = strict_round_trip(locks_document([view], NOW))
    findings = strict_round_trip(findings_document([view]))

    assert isinstance(locks, dict) and isinstance(findings, dict)
    lock = locks["targets"][0]["locks"][0]
    assert lock["database"] == "pay\\udcffments"
    assert lock["holders"][0]["application_name"] == "app\\udc80"
    evidence = findings["findings"][0]["evidence"]
    assert evidence["holders"][0]["query"] == "\\udcfe"
    assert evidence["longest_wait_seconds"] is None
    assert evidence["holders"][0]["blocked_by"] == [1, 2]
    assert_valid_findings(findings)
    # The documents themselves are safe, so any json.dumps of them encodes too.
    json.dumps(locks_document([view], NOW), ensure_ascii=False).encode("utf-8")

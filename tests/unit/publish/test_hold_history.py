"""The keys' hold history as the publishers show it: histograms with one
series per key with a history (named by its name), summaries in
``/api/v1/locks``, and one line on the status page."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from prometheus_client import CollectorRegistry

from lockwatch.model.hold_history import HISTOGRAM_BUCKETS, DurationStats, KeyHistory
from lockwatch.model.locks import LockKey
from lockwatch.model.views import TargetStatus
from lockwatch.publish.api.locks import history_text, locks_document
from lockwatch.publish.status.page import StatusPage
from lockwatch.settings.locks import Learning, LockSettings, NamedLock
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.target_view import TargetView
from tests.fixtures.metrics import metrics_of, scraped
from tests.fixtures.notify import finding
from tests.fixtures.snapshots import DB, NOW, TARGET, backend, held, snapshot

NAMED = NamedLock("webhook-delivery", LockKey.bigint(42))
LOCKS = LockSettings(named=(NAMED,), learning=Learning(period=60.0, min_holds=3, floor=1.0))


def stats(count: int, p99: float) -> DurationStats:
    buckets = tuple(count if bound >= p99 else 0 for bound in HISTOGRAM_BUCKETS)
    return DurationStats(count, p99 / 4, p99 / 2, p99, p99 * 2, p99 / 4, count * p99 / 4, buckets)


def view() -> TargetView:
    histories = (
        KeyHistory(
            DB, LockKey.bigint(42), stats(10, 0.8), None, NOW - timedelta(hours=1), baseline=0.8
        ),
        KeyHistory(DB, LockKey.bigint(7), stats(2, 3.0), stats(1, 0.5), NOW),
        KeyHistory("", None, stats(5, 0.01), None, NOW),
    )
    snap = snapshot(held(42, 1234, held_for=2.0), backends=[backend(1234)])
    return TargetView(
        Target(TARGET, "postgresql://mon@127.0.0.1/app", locks=LOCKS),
        TargetStatus(TARGET, NOW, snap),
        lock_history=histories,
    )


HOLDS = "lockwatch_advisory_lock_hold_duration_seconds"
WAITS = "lockwatch_advisory_lock_wait_duration_seconds_count"


def registry(*, detail: bool = False) -> CollectorRegistry:
    return scraped(metrics_of(view()), detail=detail)


def histories(metrics: CollectorRegistry) -> dict[str, float | None]:
    """Each lock's count of holds, None where it has no series."""
    counts = {}
    for lock in ("webhook-delivery", "7", "(other keys)"):
        labels = {"target": TARGET, "database": "" if lock == "(other keys)" else DB, "lock": lock}
        counts[lock] = metrics.get_sample_value(f"{HOLDS}_count", labels)
        bucket = metrics.get_sample_value(f"{HOLDS}_bucket", {**labels, "le": "+Inf"})
        assert bucket == counts[lock]
    return counts


def test_each_key_with_a_history_is_one_histogram_series_named_like_its_lock() -> None:
    metrics = registry(detail=True)
    assert histories(metrics) == {"webhook-delivery": 10, "7": 2, "(other keys)": 5}
    assert metrics.get_sample_value(WAITS, {"target": TARGET, "database": DB, "lock": "7"}) == 1
    assert metrics.get_sample_value(WAITS, {"target": TARGET, "database": DB, "lock": "42"}) is None


def test_a_quiet_target_has_its_named_locks_histograms_only_unless_detail_is_asked() -> None:
    assert histories(registry()) == {"webhook-delivery": 10, "7": None, "(other keys)": None}
    wrong = replace(view(), findings=(finding(lock="7"),))
    every = histories(scraped(metrics_of(wrong)))
    assert every == {"webhook-delivery": 10, "7": 2, "(other keys)": 5}


def test_the_locks_document_serves_each_keys_summary_and_learned_budget() -> None:
    (target,) = locks_document([view()], NOW)["targets"]
    (lock,) = target["locks"]
    assert lock["history"]["holds"]["count"] == 10
    assert lock["history"]["holds"]["p99_seconds"] == 0.8
    assert lock["history"]["learned_budget_seconds"] == 8.0  # 10 x p99, over the floor
    keys = [(h["key"], h["learned_budget_seconds"]) for h in target["history"]]
    assert keys == [("42", 8.0), ("7", None), (None, None)]  # too few holds, too recent
    assert history_text(lock) == "; usually 200ms, p99 800ms over 10 holds"


def test_the_status_page_says_what_is_normal_for_a_held_key() -> None:
    board = Board()
    board.publish(view())
    page = StatusPage(board, clock=lambda: NOW).render()
    assert "usually 200ms, p99 800ms over 10 holds" in page

"""A queue's learned normal (queue_capacity_lost) outlives a restart: the
latest day of its saturated minutes goes into the state file and comes back,
on an injected clock, so the restarted monitor judges at once instead of
learning for another hour."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from lockwatch.model.queues import QueueSample
from lockwatch.monitors.queues import QueueMonitor
from lockwatch.settings.queues import Queue, QueueThresholds, SqlQueueSource
from lockwatch.settings.targets import Target
from lockwatch.state.throughput import KEPT_MINUTES, QueueThroughput

START = datetime(2026, 3, 14, 9, 0, tzinfo=UTC)
THRESHOLDS = QueueThresholds()


def busy_queue(hours: float, per_minute: int = 60) -> tuple[QueueThroughput, datetime]:
    """A queue with work waiting all along, read every 30 s, completing
    ``per_minute`` a minute, 6 slots busy, 6 consumers."""
    throughput = QueueThroughput(THRESHOLDS.capacity_learning, THRESHOLDS.capacity_window)
    at, done = START, 0
    while at < START + timedelta(hours=hours):
        throughput.add(QueueSample(at, 500, 30.0, done, in_flight=6, consumers=6))
        at += timedelta(seconds=30)
        done += per_minute // 2
    return throughput, at


def normal_of(throughput: QueueThroughput) -> tuple[float, int, float | None, float | None]:
    normal = throughput.normal(THRESHOLDS.capacity_min_minutes, 15)
    assert normal is not None
    return (normal.completed_per_minute, normal.minutes, normal.in_flight, normal.consumers)


def test_the_learned_normal_comes_back_from_the_state_file_as_it_was() -> None:
    before, _ = busy_queue(hours=3)
    saved = json.loads(json.dumps(before.dump()))  # what the state file holds
    after = QueueThroughput(THRESHOLDS.capacity_learning, THRESHOLDS.capacity_window)
    assert after.normal(THRESHOLDS.capacity_min_minutes, 15) is None  # learning, from nothing
    after.load(saved)
    assert normal_of(after) == normal_of(before) == (60.0, len(saved) - 15, 6.0, 6.0)


def test_a_day_is_kept_minutes_past_the_learning_period_and_rows_not_minutes_are_left_out() -> None:
    before, now = busy_queue(hours=30)
    saved = before.dump()
    starts = [float(row[0] or 0) for row in saved]
    assert len(saved) == KEPT_MINUTES
    assert starts[-1] - starts[0] == (KEPT_MINUTES - 1) * 60  # the latest day
    short = QueueThroughput(3 * 3600.0, THRESHOLDS.capacity_window)  # a 3-hour learning period
    junk = [["then", 1, 1, 1, 1, None, 6, 6], [START.timestamp(), -1, 1, 1, 1, None, 6, 6], "x"]
    short.load([*junk, *saved])
    short.add(QueueSample(now, 1, completed_total=0))  # this run's first reading
    restored = short.normal(1, 0)
    within = [start for start in starts if now.timestamp() - start <= 3 * 3600]
    assert restored is not None and restored.minutes == len(within) < len(saved)
    busy = QueueThroughput(THRESHOLDS.capacity_learning, THRESHOLDS.capacity_window)
    busy.add(QueueSample(now, 1, completed_total=0))
    busy.load(saved)  # this run has read the queue already: its own minutes stand
    assert busy.normal(1, 0) is None


def monitor() -> QueueMonitor:
    source = SqlQueueSource("SELECT 0 AS depth")
    return QueueMonitor(
        Target("main", "postgresql://lockwatch@localhost/app", queues=(Queue("mail", source),))
    )


def test_the_queue_monitor_saves_its_normals_and_a_restarted_one_takes_them_back() -> None:
    before, _ = busy_queue(hours=2)
    assert monitor().save(START) == {"queue_throughput": {"mail": []}}
    restarted = monitor()
    document = {"queue_throughput": {"mail": before.dump(), "gone": before.dump()}}
    restarted.restore(json.loads(json.dumps(document)))
    assert restarted.save(START) == {"queue_throughput": {"mail": before.dump()}}
    assert restarted.save_due(START, None) and not restarted.save_due(START, START)
    assert restarted.save_due(START + timedelta(minutes=10), START)
    reloaded = monitor()
    reloaded.take_over(restarted)  # a reload with the same periods keeps the minutes
    assert reloaded.save(START) == restarted.save(START)

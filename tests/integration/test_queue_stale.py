"""A queue source that stops answering (a real Redis server, SIGSTOPped: its
socket stays open and nothing comes back): its backlog is never shown frozen.
After 3 intervals the queue is unknown on the page, in /api/v1/queues and in
/metrics (only the time it was last observed remains), one finding names the
source and why, and no queue finding is made from the frozen reading. When
Redis answers again, so does the queue."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from lockwatch.model.findings import FindingKind, Subject
from lockwatch.publish.api.queues import queues_document
from lockwatch.publish.status.page import StatusPage
from lockwatch.runner import TargetRunner
from lockwatch.settings.queues import Queue, QueueThresholds, RedisQueueSource
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from lockwatch.state.target_view import TargetView
from tests.fixtures.metrics import metrics_of, scraped
from tests.fixtures.postgres import PgDatabase, wait_until
from tests.fixtures.redis import RedisServer

pytestmark = pytest.mark.pg

INTERVAL = 0.5


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis") as server:
        yield server


def sample_value(view: TargetView, name: str) -> float | None:
    return scraped(metrics_of(view)).get_sample_value(name, {"target": "main", "queue": "emails"})


def test_a_redis_that_stops_answering_shows_no_frozen_backlog(
    pg: PgDatabase, redis_server: RedisServer
) -> None:
    with redis_server.client() as client:
        client.rpush("emails", *range(7))
    source = RedisQueueSource(redis_server.url, ("emails",), timeout=0.3)
    queue = Queue("emails", source, QueueThresholds(window=3.0, no_consumer_after=1.0))
    board = Board()
    runner = TargetRunner(
        Target("main", pg.monitor_dsn, interval=INTERVAL, queues=(queue,)),
        board,
        StateStore(None),
    )
    page = StatusPage(board)
    pid = redis_server._proc.pid if redis_server._proc else 0
    try:
        view = runner.poll_once()
        assert sample_value(view, "lockwatch_queue_depth") == 7
        os.kill(pid, signal.SIGSTOP)
        stopped = datetime.now(UTC)

        def unknown() -> TargetView | None:
            polled = runner.poll_once()
            # Never a queue finding from the frozen reading: only the source's.
            assert {f.kind for f in polled.findings} <= {FindingKind.TARGET_DOWN}
            [entry] = queues_document([polled])["targets"][0]["queues"]
            return polled if entry["stale"] else None

        view = wait_until(unknown, timeout=30, interval=INTERVAL, message="the queue unknown")
        [down] = view.findings
        assert down.subject == Subject(source="queue/emails")
        assert "timeout" in down.summary.lower() or "timed out" in down.summary.lower()
        [entry] = queues_document([view])["targets"][0]["queues"]
        assert entry["depth"] is None and entry["observed_at"] is not None
        assert sample_value(view, "lockwatch_queue_depth") is None
        observed = sample_value(view, "lockwatch_queue_observed_timestamp_seconds")
        assert observed is not None and observed <= stopped.timestamp()
        html = page.render()
        assert "<td>emails</td><td>unknown</td>" in html
        for _ in range(4):  # it stays so: one finding, about the source
            view = runner.poll_once()
            assert [f.kind for f in view.findings] == [FindingKind.TARGET_DOWN]
    finally:
        os.kill(pid, signal.SIGCONT)
    try:
        back = wait_until(
            lambda: (v := runner.poll_once()).queues[0].latest is not None and v,
            timeout=60,
            interval=INTERVAL,
            message="the queue read again",
        )
        assert isinstance(back, TargetView)
        assert sample_value(back, "lockwatch_queue_depth") == 7
        assert not [f for f in back.findings if f.kind is FindingKind.TARGET_DOWN]
    finally:
        runner.close()

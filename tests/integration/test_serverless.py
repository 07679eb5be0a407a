"""Let it sleep (issue 18, part 5): a target marked serverless whose server has
no client but lockwatch closes its session and looks again only every
``sleep.interval``; the server's own log shows no lockwatch session at all in
between, and lockwatch shows the target asleep, never down. A client seen at a
look wakes it up."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import psycopg
import pytest

from lockwatch.demo.pgbinaries import embedded_bin_dir
from lockwatch.demo.pgcluster import LocalCluster
from lockwatch.model.findings import FindingKind
from lockwatch.publish.metrics.registry import Metrics
from lockwatch.publish.status.page import StatusPage
from lockwatch.runner import TargetRunner
from lockwatch.settings.serverless import SleepSettings
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from lockwatch.state.target_view import TargetView
from tests.fixtures.metrics import scraped
from tests.fixtures.postgres import MONITOR_PASSWORD, MONITOR_USER, wait_until

pytestmark = [pytest.mark.pg, pytest.mark.slow]

SLEEP = SleepSettings(after=1.0, interval=3.0)
# Every connection and statement in the server's log, with its time and user.
LOGGING = {
    "log_connections": "on",
    "log_disconnections": "on",
    "log_statement": "all",
    "log_timezone": "UTC",
    "log_line_prefix": "%m user=%u ",
}


@pytest.fixture(scope="module")
def logged_server() -> Iterator[LocalCluster]:
    with LocalCluster(embedded_bin_dir(), settings=LOGGING) as server:
        server.create_password_role(MONITOR_USER, MONITOR_PASSWORD, "pg_monitor")
        yield server


def lockwatch_log(server: LocalCluster) -> list[tuple[datetime, str]]:
    """What the server logged of lockwatch's role, and when: its connections,
    statements and disconnections."""
    lines = []
    for line in server.log_path.read_text(errors="replace").splitlines():
        stamp, _, rest = line.partition(" user=")
        if rest.startswith(f"{MONITOR_USER} "):
            at = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f %Z").replace(tzinfo=UTC)
            lines.append((at, rest.removeprefix(f"{MONITOR_USER} ")))
    return lines


class Views:
    """Each view the runner publishes, with the moment it was published."""

    def __init__(self) -> None:
        self.seen: list[tuple[datetime, TargetView]] = []
        self._lock = threading.Lock()

    def record(self, view: TargetView) -> None:
        with self._lock:
            self.seen.append((datetime.now(UTC), view))

    def after(self, count: int) -> list[tuple[datetime, TargetView]]:
        with self._lock:
            return self.seen[count:]


def test_an_idle_serverless_server_is_left_to_sleep_and_shown_asleep(
    logged_server: LocalCluster,
) -> None:
    board = Board()
    views = Views()
    board.subscribe(views.record)
    target = Target(
        "neon",
        logged_server.dsn(user=MONITOR_USER, password=MONITOR_PASSWORD),
        interval=0.2,
        serverless=True,
        sleep=SLEEP,
    )
    runner = TargetRunner(target, board, StateStore(None))
    runner.start()
    try:
        fell_asleep, asleep = wait_until(
            lambda: next(((at, v) for at, v in views.after(0) if v.asleep_since), None),
            message="lockwatch lets the idle server sleep",
        )
        polls_then = len(views.after(0))
        registry = scraped(Metrics(board))
        assert registry.get_sample_value("lockwatch_target_asleep", {"target": "neon"}) == 1.0
        assert registry.get_sample_value("lockwatch_up", {"target": "neon"}) == 1.0
        assert "asleep" in StatusPage(board).render()
        assert not any(f.kind is FindingKind.TARGET_DOWN for f in asleep.findings)

        # A client arrives while it sleeps: no lockwatch session is there now,
        # and at its next look lockwatch sees the client and wakes up.
        with psycopg.connect(logged_server.dsn(), autocommit=True) as client:
            row = client.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE usename = %s", (MONITOR_USER,)
            ).fetchone()
            assert row == (0,), "lockwatch's session is closed while the server sleeps"
            _, look = wait_until(
                lambda: next(iter(views.after(polls_then)), None),
                timeout=SLEEP.interval + 20,
                message="lockwatch looks again after sleep.interval",
            )
            assert look.asleep_since is None, "a client at the look wakes the target up"
            assert look.status is not None and look.up
    finally:
        runner.stop()
        runner.join(10)

    assert look.polls_total == asleep.polls_total + 1, "no poll while it slept"
    # From the server's side: after the session lockwatch closed (whose end
    # may be logged a moment later), the first thing of lockwatch's is the
    # look connecting again, after the sleep.
    after = [
        (at, line)
        for at, line in lockwatch_log(logged_server)
        if at >= fell_asleep and not line.startswith("LOG:  disconnection:")
    ]
    assert after, "the look is in the server's log"
    woke, first = after[0]
    assert "connection auth" in first, after[:3]
    assert (woke - fell_asleep).total_seconds() >= SLEEP.interval / 2, after[:3]

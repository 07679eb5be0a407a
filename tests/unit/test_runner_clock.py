"""A runner's parts read the runner's clock, never the module's: a test (or a
replay) that pins the runner's time gets it everywhere."""

from __future__ import annotations

from datetime import UTC, datetime

from lockwatch.monitors.jobs import JobMonitor
from lockwatch.runner import TargetRunner
from lockwatch.settings.jobs import JobSpec
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore

PINNED = datetime(2031, 5, 4, 3, 2, 1, tzinfo=UTC)


def test_the_job_monitor_starts_at_the_runners_now_not_the_wall_clocks() -> None:
    target = Target("main", "postgresql://127.0.0.1:1/app")
    job = JobSpec("nightly", target="main", query="SELECT 1")
    runner = TargetRunner(target, Board(), StateStore(None), clock=lambda: PINNED, jobs=(job,))
    (monitor,) = [m for m in runner.monitors if isinstance(m, JobMonitor)]
    assert monitor.started_at == PINNED

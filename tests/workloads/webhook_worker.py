"""A webhook worker of seed 002 as a process of its own: it claims jobs from
webhook_jobs under pg_advisory_lock(42) and delivers each with no timeout,
releasing the lock only after the delivery, as the seed's workers did. With
``--for-update`` it takes no advisory lock and claims the oldest pending job
with SELECT ... FOR UPDATE (no SKIP LOCKED) inside a transaction that lasts
the delivery: seed 002's stall with a row lock.

    WEBHOOK_DSN=... python webhook_worker.py NAME GROUP [--burn SECONDS] [--no-lock]
        [--for-update]

NAME is its application_name; GROUP only marks its command line, so a test's
worker group matches its own workers. SIGTERM stops it between jobs.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from typing import Any

import psycopg
import requests

from lockwatch.demo.scenarios import claim_and_deliver


def claim_for_update_and_deliver(
    conn: psycopg.Connection[Any], http: requests.Session, worker: str
) -> bool:
    """One job claimed with a row lock held across its delivery; False when none was pending."""
    with conn.transaction():
        row = conn.execute(
            "SELECT id, url FROM webhook_jobs WHERE status = 'pending'"
            " ORDER BY created_at, id LIMIT 1 FOR UPDATE"
        ).fetchone()
        if row is None:
            return False
        http.post(row[1], json={"event": "order.paid", "job": row[0]}, timeout=None)
        conn.execute(
            "UPDATE webhook_jobs SET status = 'done', worker = %s, finished_at = now()"
            " WHERE id = %s",
            (worker, row[0]),
        )
    return True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("name")
    parser.add_argument("group")
    parser.add_argument("--burn", type=float, default=0.0, help="CPU seconds per job")
    parser.add_argument("--no-lock", action="store_true")
    parser.add_argument("--for-update", action="store_true")
    args = parser.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    lock_key = None if args.no_lock else 42
    with (
        psycopg.connect(
            os.environ["WEBHOOK_DSN"], autocommit=True, application_name=args.name
        ) as conn,
        requests.Session() as http,
    ):
        while not stop.is_set():
            try:
                if args.for_update:
                    worked = claim_for_update_and_deliver(conn, http, args.name)
                else:
                    worked = claim_and_deliver(
                        conn, http, args.name, lock_key=lock_key, burn=args.burn
                    )
            except requests.RequestException:
                continue  # the receiver went away; the job stays claimed, as in the seed
            if not worked:
                # Idle, it looks again in 0.2 s (it was 0.05): six idle workers
                # each claiming twenty times a second (five round trips each)
                # burned CPU for nothing; a new job waits at most 0.2 s more.
                stop.wait(0.2)


if __name__ == "__main__":
    main()

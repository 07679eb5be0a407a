"""A webhook worker of seed 002 as a process of its own: it claims jobs from
webhook_jobs under pg_advisory_lock(42) and delivers each with no timeout,
releasing the lock only after the delivery, as the seed's workers did.

    WEBHOOK_DSN=... python webhook_worker.py NAME GROUP [--burn SECONDS] [--no-lock]

NAME is its application_name; GROUP only marks its command line, so a test's
worker group matches its own workers. SIGTERM stops it between jobs.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading

import psycopg
import requests

from lockwatch.demo.scenarios import claim_and_deliver


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("name")
    parser.add_argument("group")
    parser.add_argument("--burn", type=float, default=0.0, help="CPU seconds per job")
    parser.add_argument("--no-lock", action="store_true")
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
                worked = claim_and_deliver(conn, http, args.name, lock_key=lock_key, burn=args.burn)
            except requests.RequestException:
                continue  # the receiver went away; the job stays claimed, as in the seed
            if not worked:
                stop.wait(0.05)


if __name__ == "__main__":
    main()

"""Seed 000's nightly job, as each app server ran it: take the leader lock with
pg_try_advisory_lock in autocommit, and if it says yes, record the run.

    python nightly_scheduler.py DSN HOST REPORT_DATE

Prints "leader" or "not a leader". Exits without unlocking, as the seed's
scheduler did between runs: on a direct connection the lock dies with the
session; through a transaction pool it stays on the server connection.
"""

from __future__ import annotations

import sys

import psycopg

LEADER_LOCK = 4242


def main() -> None:
    dsn, host, report_date = sys.argv[1:4]
    # No server-side prepared statements: they do not survive transaction pooling.
    with psycopg.connect(
        dsn, autocommit=True, prepare_threshold=None, application_name=f"scheduler-{host}"
    ) as conn:
        row = conn.execute("SELECT pg_try_advisory_lock(%s)", (LEADER_LOCK,)).fetchone()
        if not (row and row[0]):
            print("not a leader")
            return
        conn.execute(
            "INSERT INTO report_runs (report_date, host, started_at) VALUES (%s, %s, now())",
            (report_date, host),
        )
        print("leader")


if __name__ == "__main__":
    main()

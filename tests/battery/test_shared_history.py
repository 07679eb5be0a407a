"""Two replicas of a shard keeping their resolved incidents in one shared
store: each incident once (5 rows for 3 incidents before), and one that ended
while a replica was down keeps the time it really ended (it got that
replica's restart time)."""

from __future__ import annotations

from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests

from tests.battery.conftest import Record
from tests.fixtures.postgres import PgDatabase, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config

pytestmark = [pytest.mark.pg, pytest.mark.slow]

KEY = 8080
TABLE = "lockwatch_incidents"  # lockwatch.state.incident_history.TABLE


def rows(battery_db: PgDatabase) -> list[tuple[str, datetime, str]]:
    with psycopg.connect(battery_db.admin_dsn, autocommit=True) as conn:
        found = conn.execute(
            f"SELECT id, resolved_at, document->>'fingerprint' FROM {TABLE} ORDER BY resolved_at"
        ).fetchall()
    return [(str(r[0]), r[1], str(r[2])) for r in found]


def more_rows(battery_db: PgDatabase, than: int) -> bool:
    return len(rows(battery_db)) > than


def open_incidents(replica: LockwatchProcess) -> list[dict[str, Any]]:
    document = requests.get(f"{replica.base}/api/v1/incidents?state=open", timeout=5).json()
    return [i for i in document["incidents"] if i["target"] == "main"]


def test_replicas_sharing_the_history_keep_each_incident_once_with_its_real_end(
    tmp_path: Path, battery_db: PgDatabase, battery: Record
) -> None:
    replicas = []
    for name in ("a", "b"):
        home = tmp_path / name
        home.mkdir()
        port = free_port()
        config = write_config(home, port, {"main": battery_db.monitor_dsn})
        with config.open("a") as extra:
            extra.write(
                f"pings: {{store: postgres, dsn: '{battery_db.admin_dsn}'}}\n"
                # three incidents of one root, not one reopened (test_living_messages)
                "incidents: {history: pings, reopen_grace: 0s}\n"
            )
        replicas.append(LockwatchProcess(config, home / "lockwatch.log", port))
    a, b = replicas
    holder = battery_db.connect("holder")
    for replica in replicas:
        replica.start()
    try:

        def incident(both: bool) -> None:
            holder.execute("SELECT pg_advisory_lock(%s)", (KEY,))
            watching = replicas if both else [a]
            wait_until(lambda: all(open_incidents(r) for r in watching), timeout=30)

        for _ in range(3):
            before = len(rows(battery_db))
            incident(both=True)
            holder.execute("SELECT pg_advisory_unlock(%s)", (KEY,))
            wait_until(lambda: all(not open_incidents(r) for r in replicas), timeout=30)
            wait_until(partial(more_rows, battery_db, before), timeout=30)
        three = rows(battery_db)

        incident(both=True)  # then b goes down, and the incident ends meanwhile
        b.stop()
        holder.execute("SELECT pg_advisory_unlock(%s)", (KEY,))
        wait_until(lambda: len(rows(battery_db)) == len(three) + 1, timeout=30)
        ended = rows(battery_db)[-1]
        b.start()  # its restart time comes after the end a saw
        wait_until(lambda: "resolved" in b.log() and not open_incidents(b), timeout=30)
        wait_until(lambda: (b.metric("lockwatch_polls_total", target="main") or 0) >= 3)
        after = rows(battery_db)
    finally:
        for replica in replicas:
            replica.stop()
    assert len(three) == 3, three
    assert len({fingerprint for _, _, fingerprint in three}) == 1  # one root, three times
    assert len(after) == 4, after
    assert after[-1] == ended  # the end a saw, not b's restart
    battery(
        "history-replicas",
        injected=(
            "two replicas sharing incidents: {history: pings}; 3 incidents on one target "
            "seen by both; a 4th that ended while replica b was down"
        ),
        did=(
            f"{len(three)} rows for the 3 incidents (the first writer's each); after b came "
            f"back and resolved its copy, {len(after)} rows"
        ),
        intact="yes: one row per incident; the 4th keeps the end replica a saw",
    )

"""The demo's two stories as incidents, on a real server: the hung webhook
worker is ONE incident (its convoy, long hold, orphan and the stalled queue
inside it), the blog generator's orphaned lock another, and nothing else.
Watched through the API while ``lockwatch demo`` runs, then read in what it
printed once stopped as a user stops it."""

from __future__ import annotations

import io
import os
import signal
from typing import Any

import psycopg
import pytest
import requests

from lockwatch.demo.run import DEMO_DATABASE, run_demo
from lockwatch.model.findings import FindingKind
from lockwatch.model.incidents import Incident, RootKind, load_incident
from tests.fixtures.postgres import PgDatabase, free_port, run_in_thread, wait_until
from tests.fixtures.schema import assert_valid_incidents

pytestmark = [pytest.mark.pg, pytest.mark.slow]

HUNG_WORKER = {
    FindingKind.LOCK_CONVOY,
    FindingKind.LOCK_HELD_TOO_LONG,
    FindingKind.LOCK_ORPHANED,
    FindingKind.QUEUE_STALLED,
}
TOLD_WITHIN = 90.0  # the demo's story takes some 15 s; a loaded two-core machine, longer
# A cap on the demo in case the watcher never stops it: past the watcher's own
# deadline, so its SIGTERM can only come while the demo still handles it.
DEMO_CAP = 2 * TOLD_WITHIN


def _both_told(base: str) -> tuple[dict[str, Any], Incident, Incident] | None:
    """The API's incidents once they hold the worker's with every kind of its
    story, and the blog's: the document and those two."""
    try:
        document: dict[str, Any] = requests.get(f"{base}/api/v1/incidents", timeout=5).json()
    except requests.ConnectionError:
        return None  # the demo's daemon is not listening yet
    incidents = [i for e in document["incidents"] if (i := load_incident(e)) is not None]
    worker = [i for i in incidents if set(i.kinds) >= HUNG_WORKER]
    blog = [i for i in incidents if i.root.application_name == "blog-generator"]
    if len(worker) == 1 and len(blog) == 1:
        return document, worker[0], blog[0]
    return None


def _holders(pg: PgDatabase) -> dict[str, int]:
    """Ground truth, the server's: who holds lock 42 and lock (7,13)."""
    with psycopg.connect(pg.admin_dsn, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT CASE WHEN objsubid = 1 THEN objid::text ELSE classid || ',' || objid END, pid"
            " FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = %s)",
            (DEMO_DATABASE,),
        ).fetchall()
    return {str(key): int(pid) for key, pid in rows}


@pytest.mark.parametrize("pg_server", ["pg18"], indirect=True)
def test_the_demo_tells_the_hung_worker_and_the_orphaned_blog_lock_as_two_incidents(
    pg: PgDatabase,
) -> None:
    port = free_port()

    def watch_then_stop() -> tuple[dict[str, Any], Incident, Incident, dict[str, int]]:
        document, worker, blog = wait_until(
            lambda: _both_told(f"http://127.0.0.1:{port}"),
            timeout=TOLD_WITHIN,
            interval=0.5,
            message="both incidents told",
        )
        holders = _holders(pg)
        # As Ctrl-C or a kill ends the demo: its handler ends the incidents.
        os.kill(os.getpid(), signal.SIGTERM)
        return document, worker, blog, holders

    watcher = run_in_thread(watch_then_stop)
    out = io.StringIO()
    # In the main thread: the demo takes SIGTERM and SIGINT there.
    assert run_demo(dsn=pg.admin_dsn, duration=DEMO_CAP, listen=f"127.0.0.1:{port}", out=out) == 0
    document, worker, blog, holders = watcher.result()

    assert_valid_incidents(document)
    assert {i["id"] for i in document["incidents"]} == {worker.id, blog.id}
    assert worker.root.kind is RootKind.SESSION
    assert worker.root.pid == holders["42"]
    assert worker.root.application_name is not None
    assert worker.root.application_name.startswith("webhook-worker-")
    assert (
        f"pid {worker.root.pid} {worker.root.application_name} holds webhook-delivery (42)"
        in worker.title
    )
    assert "queue webhooks stalled" in worker.title
    assert worker.waiters >= 1
    assert worker.next_step.sql is not None and str(worker.root.pid) in worker.next_step.sql
    assert blog.root.pid == holders["7,13"]
    assert FindingKind.LOCK_ORPHANED in blog.kinds

    text = out.getvalue()
    opened = [line for line in text.splitlines() if line.startswith("INCIDENT OPENED")]
    assert any("holds webhook-delivery (42)" in line for line in opened), text
    assert any("blog-generator holds daily-post-generation (7,13)" in line for line in opened), text
    # The backlog the hung worker left is its incident's, not a story of its own.
    assert not any(line.startswith("INCIDENT OPENED queue") for line in opened), text
    assert len(opened) == 2, text
    assert "INCIDENT RESOLVED" in text
    assert "demo finished; nothing left running" in text, text

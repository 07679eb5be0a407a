"""The demo's two stories as incidents, on a real server: the hung webhook
worker is ONE incident (its convoy, long hold, orphan and the stalled queue
inside it), the blog generator's orphaned lock another, and nothing else."""

from __future__ import annotations

import io
import threading
from typing import Any

import pytest
import requests

from lockwatch.daemon import Daemon
from lockwatch.demo.run import demo_settings, run_demo
from lockwatch.demo.scenarios import OrphanIncident, WebhookQueueIncident
from lockwatch.model.findings import FindingKind
from lockwatch.model.incidents import Incident, RootKind
from tests.fixtures.postgres import PgDatabase, wait_until
from tests.fixtures.schema import assert_valid_incidents

pytestmark = [pytest.mark.pg, pytest.mark.slow]

HUNG_WORKER = {
    FindingKind.LOCK_CONVOY,
    FindingKind.LOCK_HELD_TOO_LONG,
    FindingKind.LOCK_ORPHANED,
    FindingKind.QUEUE_STALLED,
}


def _both_told(daemon: Daemon) -> tuple[Incident, Incident] | None:
    """The worker's incident with every kind of its story, and the blog's."""
    (view,) = daemon.board.views()
    worker = [i for i in view.incidents if {f.kind for f in i.findings} >= HUNG_WORKER]
    blog = [i for i in view.incidents if i.root.application_name == "blog-generator"]
    if len(worker) == 1 and len(blog) == 1:
        return worker[0], blog[0]
    return None


@pytest.mark.parametrize("pg_server", ["pg18"], indirect=True)
def test_the_hung_worker_and_the_orphaned_blog_lock_are_two_incidents(pg: PgDatabase) -> None:
    convoy = WebhookQueueIncident(pg.admin_dsn)
    convoy.prepare()
    daemon = Daemon(demo_settings(pg.admin_dsn, "127.0.0.1:0"), listeners=())
    daemon.start()
    orphan = OrphanIncident(pg.admin_dsn)
    watchdog = threading.Thread(target=daemon.watch, daemon=True)
    try:
        convoy.start()
        orphan.start()
        watchdog.start()
        worker, blog = wait_until(lambda: _both_told(daemon), timeout=90, interval=0.5)
        (view,) = daemon.board.views()
        assert len(view.incidents) == 2, [i.title for i in view.incidents]
        assert worker.root.kind is RootKind.SESSION
        assert worker.root.application_name is not None
        assert worker.root.application_name.startswith("webhook-worker-")
        assert (
            f"pid {worker.root.pid} {worker.root.application_name} holds webhook-delivery (42)"
            in worker.title
        )
        assert "queue webhooks stalled" in worker.title
        assert worker.waiters >= 1
        assert worker.next_step.sql is not None and str(worker.root.pid) in worker.next_step.sql
        assert blog.root.pid == orphan.pid
        assert {f.kind for f in blog.findings} >= {FindingKind.LOCK_ORPHANED}
        host, port = daemon.http.address
        answer = requests.get(f"http://{host}:{port}/api/v1/incidents", timeout=5)
        document: dict[str, Any] = answer.json()
        assert_valid_incidents(document)
        assert {i["id"] for i in document["incidents"]} == {worker.id, blog.id}
    finally:
        convoy.stop()
        orphan.stop()
        daemon.stop()


@pytest.mark.parametrize("pg_server", ["pg18"], indirect=True)
def test_the_demo_tells_its_incidents(pg: PgDatabase) -> None:
    out = io.StringIO()
    assert run_demo(dsn=pg.admin_dsn, duration=25.0, listen="127.0.0.1:0", out=out) == 0
    text = out.getvalue()
    opened = [line for line in text.splitlines() if line.startswith("INCIDENT OPENED")]
    assert any("holds webhook-delivery (42)" in line for line in opened), text
    assert any("blog-generator holds daily-post-generation (7,13)" in line for line in opened), text
    assert "INCIDENT RESOLVED" in text
    # The backlog the hung worker left is its incident's, not a story of its own.
    assert not any(line.startswith("INCIDENT OPENED queue") for line in opened), text
    assert len(opened) == 2, text

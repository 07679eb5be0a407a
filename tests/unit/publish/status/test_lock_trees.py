"""The status page's lock trees: the root first, who waits on it nested under
it, a person reads it at a glance with no script; every value from a client
escaped."""

from __future__ import annotations

import re
from dataclasses import replace

from lockwatch.model.lock_waits import LockRowFact, lock_waits
from lockwatch.model.locks import LockSnapshot
from lockwatch.model.views import TargetStatus
from lockwatch.publish.status.page import StatusPage
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.target_view import TargetView
from tests.fixtures.snapshots import NOW, TARGET, ago, backend

HOSTILE = "<script>alert(1)</script>"
TABLE = "relation:5:16384"


def view_with_queue() -> TargetView:
    rows = [
        LockRowFact(1, "relation", TABLE, "AccessShareLock", True),
        LockRowFact(2, "relation", TABLE, "AccessExclusiveLock", False, ago(30), HOSTILE),
        LockRowFact(3, "relation", TABLE, "AccessShareLock", False, ago(20)),
    ]
    backends = {
        1: backend(1, "report", state="idle in transaction", xact_for=600, query=HOSTILE),
        2: backend(2, "migrate", query="ALTER TABLE jobs ADD COLUMN note text"),
        3: backend(3, "worker", query="SELECT * FROM jobs"),
    }
    snap = LockSnapshot(TARGET, NOW, 180000, (), backends, waits=lock_waits(rows))
    target = Target(TARGET, "postgresql://db/app")
    return TargetView(target, TargetStatus(TARGET, NOW, snap), polls_total=1, last_success=NOW)


def render(view: TargetView) -> str:
    board = Board()
    board.publish(view)
    return StatusPage(board, clock=lambda: NOW).render(refresh=False)


def test_the_tree_nests_the_queue_under_the_alter_under_the_idle_reader() -> None:
    page = render(view_with_queue())
    tree = page.split('<ul class="tree">', 1)[1]
    root, alter, reader = (tree.index(f"pid {pid} ") for pid in (1, 2, 3))
    assert root < alter < reader
    # Each waiter one list deeper than the session it waits on.
    assert tree[:alter].count("<ul>") == 1 and tree[:reader].count("<ul>") == 2
    assert "idle in transaction, transaction open 10m" in tree
    assert "wants AccessExclusiveLock on relation" in tree and "(blocked by 1)" in tree
    assert "(blocked by 2)" in tree
    assert HOSTILE not in page and "&lt;script&gt;" in tree
    assert not re.search(r"<script", page)


def test_no_wait_no_tree() -> None:
    view = view_with_queue()
    assert view.status is not None and view.status.snapshot is not None
    quiet = replace(view.status, snapshot=replace(view.status.snapshot, waits=()))
    assert '<ul class="tree">' not in render(replace(view, status=quiet))

"""Seed 003 on a busy client pool (issue 18, part 3), with the real node-postgres
``pg`` package: a session lock taken with ``pool.query`` stays on the pooled
client that ran it, and the pool keeps lending that client to other short
queries, so it is never idle for ``orphan_after`` in one stretch. lockwatch
says it is orphaned once per hold, keeps saying it while that client holds the
key, and resolves it once, when ``pool.query`` unlocks it on that client."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict

from lockwatch.model.evidence import LockEvidence
from lockwatch.model.findings import Finding, FindingKind
from lockwatch.model.incidents import IncidentChanges
from lockwatch.model.locks import LockKey
from lockwatch.runner import TargetRunner
from lockwatch.settings.locks import LockSettings
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from lockwatch.state.target_view import TargetView
from tests.fixtures.evidence import evidence_as
from tests.fixtures.incident_values import ToldFindings
from tests.fixtures.paths import ROOT
from tests.fixtures.postgres import PgDatabase, wait_until

pytestmark = [pytest.mark.pg, pytest.mark.slow]

SCRIPT = ROOT / "tests" / "integration" / "js" / "busy_pool.js"
NODE_MODULES = ROOT / ".js" / "node_modules"
ORPHAN_AFTER = 2.0
INTERVAL = 0.25
HOLDS = 2  # one finding per hold, over more than one hold
WATCH = ORPHAN_AFTER + 3.0  # seconds of busy traffic watched per hold
KEY = LockKey.parse("7,13")
# How far lockwatch's reading of the server's clock may be from the script's:
# both are this machine's clock, and lockwatch measures its offset per poll.
SLACK = timedelta(seconds=0.1)


class NodePool:
    """tests/integration/js/busy_pool.js running against a database: a pg.Pool
    under traffic that takes and releases the lock when told to."""

    def __init__(self, dsn: str) -> None:
        node = shutil.which("node")
        if node is None or not (NODE_MODULES / "pg").is_dir():
            raise RuntimeError("node-postgres is missing: run scripts/bootstrap (npm step)")
        params = conninfo_to_dict(dsn)
        env = {
            **os.environ,
            "NODE_PATH": str(NODE_MODULES),
            "PGHOST": str(params["host"]),
            "PGPORT": str(params["port"]),
            "PGUSER": str(params["user"]),
            "PGDATABASE": str(params["dbname"]),
            "PGAPPNAME": "blog-generator",
            "POOL_SIZE": "3",
            "TRAFFIC": "4",
        }
        if params.get("password"):
            env["PGPASSWORD"] = str(params["password"])
        self._proc = subprocess.Popen(
            [node, str(SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self._events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.expect("ready")

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._events.put(json.loads(line))
        self._events.put({"event": "exited"})

    def expect(self, event: str) -> dict[str, Any]:
        try:
            got = self._events.get(timeout=30)
        except queue.Empty:
            got = {"event": "nothing"}
        if got["event"] != event:
            raise AssertionError(f"node said {got}, not {event}: {self.stderr()}")
        return got

    def tell(self, command: str) -> dict[str, Any]:
        assert self._proc.stdin is not None
        self._proc.stdin.write(command + "\n")
        self._proc.stdin.flush()
        return self.expect(f"{command}ed")

    def stderr(self) -> str:
        if self._proc.poll() is None or self._proc.stderr is None:
            return ""
        return self._proc.stderr.read()

    def close(self) -> None:
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            self._proc.stdin.close()  # the pool ends, and its sessions with it
        try:
            self._proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=10)
        self._reader.join(10)
        for pipe in (self._proc.stdout, self._proc.stderr):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def node_pool(pg: PgDatabase) -> Iterator[NodePool]:
    pool = NodePool(pg.admin_dsn)
    yield pool
    pool.close()


@dataclass(frozen=True)
class Poll:
    """What one of lockwatch's polls saw, by lockwatch's own clock."""

    at: datetime
    # The sessions seen holding the script's key: pid -> (first_seen, seen held
    # with no transaction open, i.e. the client moved on). Kept whole, for the
    # poll may come before the test learns which pid the script's lock is on.
    held: dict[int, tuple[datetime | None, bool]]
    orphans: tuple[Finding, ...]  # the lock_orphaned findings active after it
    fired: bool  # a lock_orphaned fired in this poll
    resolved: bool

    def first_seen(self, pid: int) -> datetime | None:
        return self.held[pid][0] if pid in self.held else None

    def session_level(self, pid: int) -> bool:
        return pid in self.held and self.held[pid][1]


class Recorder:
    """Every poll of the runner, with the findings its incidents told fired and resolved."""

    def __init__(self) -> None:
        self.polls: list[Poll] = []
        self.findings = ToldFindings()

    def observe(self, view: TargetView) -> None:
        """Called by the board with each view, before the runner's listeners."""
        assert view.status is not None and view.status.snapshot is not None, view.status
        held = {
            lock.pid: (lock.first_seen, bool(lock.session_level))
            for lock in view.status.snapshot.locks
            if lock.granted and lock.key == KEY
        }
        self.polls.append(
            Poll(
                view.status.checked_at,
                held,
                tuple(f for f in view.findings if f.kind is FindingKind.LOCK_ORPHANED),
                False,
                False,
            )
        )

    def told(self, changes: IncidentChanges) -> None:
        fired, resolved = self.findings(changes)
        last = self.polls[-1]
        self.polls[-1] = Poll(
            last.at,
            last.held,
            last.orphans,
            any(f.kind is FindingKind.LOCK_ORPHANED for f in fired),
            any(f.kind is FindingKind.LOCK_ORPHANED for f in resolved),
        )

    def since(self, moment: datetime) -> list[Poll]:
        return [poll for poll in list(self.polls) if poll.at >= moment]


def one_hold(
    node_pool: NodePool, record: Recorder
) -> tuple[dict[str, Any], datetime, dict[str, Any], list[Poll]]:
    """The script takes the lock, traffic goes on for WATCH seconds by
    lockwatch's clock, the script unlocks and lockwatch tells it resolved:
    (locked, when, unlocked, the polls since)."""
    locked = node_pool.tell("lock")
    taken = datetime.fromisoformat(locked["at"])
    wait_until(
        lambda: any(p.at - taken >= timedelta(seconds=WATCH) for p in record.since(taken)),
        timeout=WATCH + 20,
    )
    unlocked = node_pool.tell("unlock")
    gone = datetime.fromisoformat(unlocked["at"])
    wait_until(
        lambda: any(p.resolved for p in record.since(gone)),
        message="the orphan resolves when unlocked",
    )
    return locked, taken, unlocked, record.since(taken)


def test_an_orphan_on_a_busy_node_pool_fires_once_per_hold_and_resolves_once(
    pg: PgDatabase, node_pool: NodePool
) -> None:
    record = Recorder()
    board = Board()
    board.subscribe(record.observe)
    target = Target(
        "main",
        pg.monitor_dsn,
        interval=INTERVAL,
        locks=LockSettings(orphan_after=ORPHAN_AFTER, max_hold=3600.0),
    )
    runner = TargetRunner(target, board, StateStore(None), listeners=(record.told,))
    runner.start()
    try:
        holds = [one_hold(node_pool, record) for _ in range(HOLDS)]
    finally:
        runner.stop()
        runner.join(10)

    for locked, taken, unlocked, polls in holds:
        assert locked["pid"] == unlocked["pid"], "only the holder's client can unlock it"
        during = [p for p in polls if p.at <= datetime.fromisoformat(unlocked["at"])]
        # One hold, one finding: fired once, active ever after, resolved once.
        fired = [i for i, p in enumerate(polls) if p.fired]
        assert len(fired) == 1, polls
        assert all(p.orphans for p in during[fired[0] :]), "it flapped"
        assert sum(p.resolved for p in polls) == 1, polls
        (orphan,) = polls[fired[0]].orphans
        evidence = evidence_as(orphan, LockEvidence)
        assert evidence.holder_pid == locked["pid"]
        # How long it could live here, from the server's own settings.
        assert evidence.orphan_lifetime is not None
        assert "TCP keepalive" in evidence.orphan_lifetime.idle_bound_by
        (holder,) = evidence.holders
        assert "advisory_lock" not in (holder.query or ""), "the pool lent the holder to others"
        # Seen at lockwatch's first poll after the client took it; the hold is
        # dated at the latest from the first poll that saw the client moved on
        # (until then it may be a transaction's lock, taken anew in each) ...
        pid = locked["pid"]
        assert next(p for p in polls if p.at >= taken).first_seen(pid) is not None
        moved_on = next(p for p in polls if p.session_level(pid))
        start = polls[fired[0]].first_seen(pid)
        assert start is not None and taken <= start + SLACK and start <= moved_on.at
        # ... and it fired at the first poll past orphan_after from then, so
        # within orphan_after + one interval, never before orphan_after.
        due = start + timedelta(seconds=ORPHAN_AFTER)
        assert orphan.since == due
        assert fired[0] == next(i for i, p in enumerate(polls) if p.at > due)

"""Hold history on a real server (issue 14, part 3): a key that a worker holds
for a few hundred milliseconds at a time teaches lockwatch its budget, which
then fires on a hold a hundred times as long and stays quiet on the normal
ones; a leader lock taken over by a new backend again and again is churn,
though no poll ever sees it free; the histograms pass promtool and their
series stay bounded."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from lockwatch.model.evidence import ChurnEvidence, LockEvidence
from lockwatch.model.findings import Finding, FindingKind
from lockwatch.model.incidents import IncidentChanges
from lockwatch.model.locks import LockKey
from lockwatch.publish.api.locks import locks_document
from lockwatch.publish.metrics.registry import Metrics
from lockwatch.runner import TargetRunner
from lockwatch.settings.fields import Learned
from lockwatch.settings.locks import Learning, LockRole, LockSettings, NamedLock
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from lockwatch.state.target_view import TargetView
from tests.fixtures.evidence import evidence_as
from tests.fixtures.incident_values import ToldFindings
from tests.fixtures.postgres import PgDatabase, run_in_thread, wait_until
from tests.fixtures.prometheus import promtool_check_metrics

pytestmark = [pytest.mark.pg, pytest.mark.slow]

INTERVAL = 0.1
NORMAL_HOLD = 0.2  # seconds the worker holds the key each time
# Few holds to learn from, as few as make a p99: the learning is what takes
# the test's time (a hold every quarter second).
LEARNING = Learning(period=1.0, min_holds=8, factor=10.0, floor=1.0)
NORMAL_HOLDS_CHECKED = 5  # normal holds seen end under the learned budget


class Watched:
    """A runner over the test database, with every finding that fired."""

    def __init__(self, pg: PgDatabase, locks: LockSettings, state_dir: Path | None = None) -> None:
        self.board = Board()
        self.fired: list[Finding] = []
        self.told = ToldFindings()
        self.runner = TargetRunner(
            Target("main", pg.monitor_dsn, interval=INTERVAL, locks=locks),
            self.board,
            StateStore(state_dir),
            lambda: datetime.now(UTC),
            (self._listen,),
        )

    def _listen(self, changes: IncidentChanges) -> None:
        fired, _ = self.told(changes)
        self.fired.extend(fired)

    def poll(self) -> TargetView:
        view = self.runner.poll_once()
        assert view.up, view.status
        time.sleep(INTERVAL)
        return view

    def kinds(self) -> list[FindingKind]:
        return [f.kind for f in self.fired]


@pytest.fixture
def short_holds(pg: PgDatabase) -> Iterator[threading.Event]:
    """A worker that takes key 99 in a transaction, holds it 200 ms, commits, again and again."""
    stop = threading.Event()
    conn = pg.connect("short-holder")

    def work() -> None:
        while not stop.is_set():
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(99), pg_sleep(%s)", (NORMAL_HOLD,))
            stop.wait(0.05)

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    yield stop
    stop.set()
    worker.join(10)


def learned_budget(view: TargetView) -> float | None:
    (target,) = locks_document([view], datetime.now(UTC))["targets"]
    budgets = [h["learned_budget_seconds"] for h in target["history"] if h["key"] == "99"]
    return budgets[0] if budgets else None


def holds_of_99(view: TargetView) -> int:
    counts = [h.holds.count for h in view.lock_history if h.key == LockKey.bigint(99) and h.holds]
    return counts[0] if counts else 0


def test_a_learned_budget_fires_on_a_hundred_times_the_normal_hold_and_not_before(
    pg: PgDatabase, short_holds: threading.Event
) -> None:
    watched = Watched(pg, LockSettings(max_hold=Learned.AUTO, learning=LEARNING))
    try:
        learned = wait_until(
            lambda: view if learned_budget(view := watched.poll()) else None,
            timeout=60,
            message="a budget learned",
        )
        budget = learned_budget(learned)
        assert budget is not None and LEARNING.floor <= budget < 10 * LEARNING.factor * NORMAL_HOLD
        enough = holds_of_99(learned) + NORMAL_HOLDS_CHECKED
        wait_until(
            lambda: holds_of_99(watched.poll()) >= enough,
            timeout=60,
            message=f"{NORMAL_HOLDS_CHECKED} more normal holds",
        )
        assert FindingKind.LOCK_HELD_TOO_LONG not in watched.kinds()

        short_holds.set()
        stuck = pg.connect("stuck-holder")
        stuck.execute("BEGIN")
        stuck.execute("SELECT pg_advisory_xact_lock(99)")
        (finding,) = wait_until(
            lambda: [
                f for f in watched.poll().findings if f.kind is FindingKind.LOCK_HELD_TOO_LONG
            ],
            timeout=60,
            message="the long hold found",
        )
        stuck.execute("COMMIT")
    finally:
        watched.runner.close()
    evidence = evidence_as(finding, LockEvidence)
    assert evidence.history is not None and evidence.history.learned
    assert evidence.holder_pid == stuck.info.backend_pid
    assert evidence.max_hold_seconds is not None and evidence.max_hold_seconds < 300.0
    assert "learned budget" in finding.summary and "usually" in finding.summary


def test_a_leader_taken_over_by_a_new_backend_again_and_again_churns(pg: PgDatabase) -> None:
    leader = NamedLock("scheduler", LockKey.bigint(77), role=LockRole.LEADER)
    locks = LockSettings(named=(leader,), leader_churn_changes=3, leader_churn_window=600.0)
    watched = Watched(pg, locks)
    holder = pg.connect("scheduler")
    holder.execute("SELECT pg_advisory_lock(77)")
    pids = [holder.info.backend_pid]
    try:
        while FindingKind.LEADER_LOCK_CHURN not in watched.kinds():
            assert len(pids) < 20, "no churn after 20 leaders"
            for _ in range(3):  # each leader seen by a few polls
                watched.poll()
            # The next leader queues before the last one's connection goes:
            # the lock passes straight from one backend to the next.
            successor = pg.connect("scheduler")
            taking = run_in_thread(partial(successor.execute, "SELECT pg_advisory_lock(77)"))
            wait_until(lambda: lock_waiters(pg, 77), message="the successor queued")
            holder.close()
            taking.result()
            holder = successor
            pids.append(holder.info.backend_pid)
        view = watched.poll()
    finally:
        watched.runner.close()
    (churn,) = [f for f in view.findings if f.kind is FindingKind.LEADER_LOCK_CHURN]
    evidence = evidence_as(churn, ChurnEvidence)
    assert evidence.changes >= 3
    assert evidence.holder_pid in pids
    assert FindingKind.LEADER_LOCK_MISSING not in watched.kinds()


def lock_waiters(pg: PgDatabase, key: int) -> int:
    with pg.connect("probe") as probe:
        row = probe.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = %s "
            "AND NOT granted",
            (key,),
        ).fetchone()
    return 0 if row is None else int(row[0])


def test_the_histograms_pass_promtool_and_their_series_stay_bounded(pg: PgDatabase) -> None:
    top_n, keys = 3, 12  # more keys than series: the other keys' holds go into one
    named = NamedLock("billing", LockKey.bigint(1))
    watched = Watched(pg, LockSettings(top_n=top_n, named=(named,)))
    conn = pg.connect("many-keys")
    try:
        for key in range(1, keys + 1):  # each held across a poll or two and released
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
                watched.poll()
            watched.poll()
    finally:
        watched.runner.close()
    # Every series: a quiet target shows its named locks' histograms only by default.
    exposition, _ = Metrics(watched.board).render(detail=True)
    checked = promtool_check_metrics(exposition)
    assert checked.returncode == 0, checked.stderr.decode() + checked.stdout.decode()
    families = {f.name: f for f in text_string_to_metric_families(exposition.decode())}
    holds = families["lockwatch_advisory_lock_hold_duration_seconds"]
    counts = {s.labels["lock"]: s.value for s in holds.samples if s.name.endswith("_count")}
    assert len(counts) == 1 + top_n + 1  # the named lock, the top N, the other keys as one
    assert counts["billing"] == 1
    assert counts["(other keys)"] == keys - 1 - top_n
    assert sum(counts.values()) == keys


def test_the_history_and_the_learned_budget_survive_a_restart(
    pg: PgDatabase, short_holds: threading.Event, tmp_path: Path
) -> None:
    locks = LockSettings(max_hold=Learned.AUTO, learning=LEARNING)
    before = Watched(pg, locks, tmp_path)
    before.runner.start()  # polling on its own thread, as in the daemon
    try:
        wait_until(
            lambda: (view := before.board.view("main")) is not None and learned_budget(view),
            timeout=60,
            message="a budget learned",
        )
        short_holds.set()
    finally:
        before.runner.stop()  # the last save, as at shutdown
    last = before.board.view("main")  # what the last poll before the save published
    assert last is not None
    history = last.lock_history
    after = Watched(pg, locks, tmp_path)
    try:
        restored = after.poll()
    finally:
        after.runner.close()
    (key,) = [h for h in restored.lock_history if h.key == LockKey.bigint(99)]
    (old,) = [h for h in history if h.key == LockKey.bigint(99)]
    assert key.holds is not None and old.holds is not None
    # The hold in progress at the save ends after the restart: at most one more.
    assert old.holds.count <= key.holds.count <= old.holds.count + 1
    assert old.holds.count >= LEARNING.min_holds
    assert key.since == old.since
    assert learned_budget(restored) is not None  # learned still: no second learning period

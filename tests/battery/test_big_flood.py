"""200,000 advisory locks past their budget (issue 28 item 11): a ``lockwatch
run`` keeps polling them through polls where nothing changed, where 1 % of
the locks were released and others taken, and where every one was, with its
state file small. Its RSS (psutil, four times a second, the most over each
phase) stays under 400 MB while the locks stay or change a little (while all
are new both generations are alive: shown, not bounded); each poll's CPU (the
daemon's, psutil, from just before a change to the end of the first poll that
started after it, less a quiet poll's for each poll before that one): a 1 %-changed poll
costs under a quarter of taking in every lock new, what the last poll knew
(the hold tracker's holds, the lock summary, the locks per holder, the rows
sorted into keys) carried over by the locks released and taken alone."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import psutil
import pytest

from lockwatch.demo.pgbinaries import embedded_bin_dir
from lockwatch.demo.pgcluster import LocalCluster
from tests.battery.conftest import Record
from tests.battery.probes import Scrape, scrape
from tests.battery.test_flood import watching
from tests.battery.test_load import Holders
from tests.fixtures.postgres import (
    MONITOR_PASSWORD,
    MONITOR_USER,
    PgDatabase,
    wait_until,
)
from tests.fixtures.processes import LockwatchProcess

pytestmark = [pytest.mark.pg, pytest.mark.slow]

LOCKS = 200_000
CHURNED = LOCKS // 100  # the 1 % released and taken anew before each poll of the middle phase
# Half the default: the test only waits for polls, whose CPU and RSS do not
# depend on it. Each change is measured to the end of the first poll that
# started after it, so a poll that overran into the next slot (a 1 %-changed
# one took 5 s on the busy machine) is never taken for the one that saw it.
INTERVAL = 5.0
# Measured per phase. With 1 % changed the first also resolves the churner's
# finding (every key it holds is new) and cost 1.3-1.5 times the second; a
# third would make the median robust to it, but each churn added to the most
# RSS (372-396 MB over three, 360-384 MB over two, bound 400 MB).
POLLS = 2
# Seconds a poll of them may take on a busy machine (the first took 18 s on two
# cores shared with five test runs).
POLL_WAIT = 120.0
RSS_GOAL_MB = 400.0
# The most a 1 %-changed poll's CPU may be of an all-new one's (measured 0.42, 0.51 and 0.46
# on two busy shared cores before the rows sorted into keys, the lock summary and
# the hold tracker's holds were carried over by what changed; 0.59 before the hold
# tracker stopped copying its keys; since, 0.15-0.19 beside two CPU burners and a
# second test loop, 0.15 in a quiet whole run).
CHANGED_SHARE = 0.25
STATE_FILE_LIMIT = 4 * 2**20  # bytes: hold times stored once per session's run of keys
# Past it at the first poll that sees a lock (its session idle since it took
# it): a change never resolves a holder's finding and fires it again at the
# next poll, which made a poll's cost depend on when it fell after the change
# (a 1 %-changed poll 0.8-1.6 s of CPU, one loaded run 0.28 of an all-new one).
OVER_BUDGET = "{max_hold: 1ms, orphan_after: 24h}"
# The lock table holds max_locks_per_transaction x (max_connections + ...): 300k.
SETTINGS = {"max_locks_per_transaction": "1024"}


@dataclass(frozen=True)
class Phase:
    cpu: float  # seconds per poll, the median
    rss_mb: float  # the most over the phase


@dataclass
class Flood:
    lockwatch: LockwatchProcess
    holders: Holders
    churner: Callable[[int], None]  # hold CHURNED keys from this one, releasing the last ones
    process: psutil.Process
    state_dir: Path
    peak_rss_mb: float = 0.0

    def seen_held(self, count: int) -> None:
        def held() -> float:  # no series with none held
            return scrape(self.lockwatch.base).get("lockwatch_advisory_locks", state="held") or 0

        wait_until(lambda: held() == count, POLL_WAIT, 0.5, f"lockwatch sees {count:,} locks held")

    def phase(
        self, change: Callable[[int], None] | None, quiet: float = 0.0, polls: int = POLLS
    ) -> Phase:
        """The median of ``polls`` polls' ``taken_in`` (``change(n)`` before
        the n-th; none: quiet polls), with the most RSS over them."""
        self.peak_rss_mb = self.process.memory_info().rss / 2**20
        costs = [
            self.taken_in(None if change is None else partial(change, n), quiet)
            for n in range(polls)
        ]
        return Phase(statistics.median(costs), self.peak_rss_mb)

    def taken_in(self, change: Callable[[], None] | None, quiet: float) -> float:
        """The daemon's CPU to take in ``change``, made right after a poll
        ended: from just before it to the end of the first poll that started
        after it, less a quiet poll's for each poll before that one. A poll may
        have started before the change (a poll that overran starts the next
        at once), or the change across many sessions outlast a poll that saw
        part of it. With no change: a quiet poll's, the window's CPU shared
        among the polls in it."""
        before, done = self.cpu(), self.polls()
        if change is not None:
            change()
        polls = self.polls(self.polled_since(time.time())) - done
        spent = self.cpu() - before
        return spent / polls if change is None else spent - (polls - 1) * quiet

    def polled_since(self, moment: float) -> Scrape:
        """The first scrape after a poll that started at or after ``moment``
        (Unix time) ended: it saw all that was done before then."""

        def polled() -> Scrape | None:
            metrics = scrape(self.lockwatch.base)
            started = metrics.get("lockwatch_last_successful_poll_timestamp_seconds", target="main")
            return metrics if started is not None and started >= moment else None

        return wait_until(polled, POLL_WAIT, 0.5, "a poll started since ends")

    def polls(self, metrics: Scrape | None = None) -> float:
        """lockwatch_polls_total in ``metrics``, or in a scrape now."""
        metrics = metrics or scrape(self.lockwatch.base)
        return metrics.get("lockwatch_polls_total", target="main") or 0.0

    def cpu(self) -> float:
        times = self.process.cpu_times()
        return float(times.user + times.system)


@pytest.fixture(scope="module")
def flood(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flood]:
    tmp_path = tmp_path_factory.mktemp("big-flood")
    with LocalCluster(embedded_bin_dir(), settings=SETTINGS) as server:
        server.create_password_role(MONITOR_USER, MONITOR_PASSWORD, "pg_monitor")
        with closing(PgDatabase(server)) as db, closing(Holders(db.admin_dsn)) as holders:
            yield from _flooded(db, holders, tmp_path)


def _flooded(db: PgDatabase, holders: Holders, tmp_path: Path) -> Iterator[Flood]:
    holders.hold(1, LOCKS - CHURNED)
    churner = db.connect("churner")

    def churn(n: int) -> None:
        churner.execute("SELECT pg_advisory_unlock_all()")
        first = 10 * LOCKS + n * CHURNED
        churner.execute(
            "SELECT count(pg_advisory_lock(k)) FROM generate_series(%s::bigint, %s) AS k",
            (first, first + CHURNED - 1),
        )

    churn(0)
    with watching(db, tmp_path, INTERVAL, 60, OVER_BUDGET) as lockwatch:
        assert lockwatch.proc is not None
        made = Flood(
            lockwatch, holders, churn, psutil.Process(lockwatch.proc.pid), tmp_path / "state"
        )
        stop = threading.Event()

        def watch_rss() -> None:
            while not stop.wait(0.25):
                try:
                    rss = made.process.memory_info().rss / 2**20
                except psutil.Error:
                    return
                made.peak_rss_mb = max(made.peak_rss_mb, rss)

        watcher = threading.Thread(target=watch_rss, daemon=True)
        watcher.start()
        try:
            yield made
        finally:
            stop.set()
            watcher.join()
            # Let go of them first, and wait for the poll that sees them gone:
            # a stop waits for a poll in flight, and a daemon still keeping
            # 200,000 locks spends seconds freeing them as it exits (7 s busy).
            # The test ends right after a quiet poll: a poll racing the release
            # (right after the all-new one, which overran) took 30 s, busy.
            holders.release()
            churner.execute("SELECT pg_advisory_unlock_all()")
            made.seen_held(0)


# On two cores shared with other test runs a poll of every lock new took a minute.
@pytest.mark.timeout(900)
def test_two_hundred_thousand_locks_past_their_budget_changing_keep_being_polled(
    flood: Flood, battery: Record
) -> None:
    flood.seen_held(LOCKS)
    quiet = flood.phase(None)
    some = flood.phase(lambda n: flood.churner(n + 1), quiet.cpu)
    # Every lock released and others taken: the holders move to fresh keys.
    whole = flood.phase(lambda _: flood.holders.hold(LOCKS, LOCKS - CHURNED), quiet.cpu, 1)
    share = (some.cpu - quiet.cpu) / max(whole.cpu - quiet.cpu, 1e-9)
    print(
        f"{LOCKS:,} locks past their budget, CPU and most RSS per poll: nothing changed "
        f"{quiet.cpu:.2f} s {quiet.rss_mb:.0f} MB, 1 % changed {some.cpu:.2f} s "
        f"{some.rss_mb:.0f} MB, all changed {whole.cpu:.2f} s {whole.rss_mb:.0f} MB"
    )
    # After the poll that followed it, as before the change: the state file's
    # refresh (.recent, beside the durable file) comes with such polls.
    metrics = flood.polled_since(time.time())
    state = flood.state_dir / "target-main.json"
    state_bytes = sum(
        p.stat().st_size for p in (state, state.with_name(f"{state.name}.recent")) if p.exists()
    )
    assert metrics.get("lockwatch_up", target="main") == 1
    assert metrics.get("lockwatch_advisory_locks", state="held") == LOCKS
    assert state_bytes < STATE_FILE_LIMIT, state_bytes
    assert max(quiet.rss_mb, some.rss_mb) < RSS_GOAL_MB, (quiet, some)
    assert some.cpu < CHANGED_SHARE * whole.cpu, (some, whole)
    battery(
        "big-flood",
        injected=(
            f"{LOCKS:,} advisory locks past their budget held by 11 sessions, polled every "
            f"{INTERVAL:g} s; then {CHURNED:,} of them (1 %) released and others taken before "
            f"each of {POLLS} polls; then all of them, once"
        ),
        did=(
            f"CPU per poll (psutil, median of {POLLS}): {quiet.cpu:.2f} s with nothing "
            f"changed, {some.cpu:.2f} s with 1 % changed, {whole.cpu:.2f} s with all changed: "
            f"the 1 % poll's extra is {100 * share:.0f} % of the whole one's (bound: the 1 % "
            f"poll under {CHANGED_SHARE:.0%} of it); RSS under {RSS_GOAL_MB:.0f} MB, the most over "
            f"each: {quiet.rss_mb:.0f} MB with nothing changed, {some.rss_mb:.0f} MB with 1 % "
            f"changed, {whole.rss_mb:.0f} MB while all were new (both generations alive)"
        ),
        intact=(
            f"yes: lockwatch_up 1 and all {LOCKS:,} counted after the last change; state file "
            f"{state_bytes / 1024:,.0f} KiB (bound {STATE_FILE_LIMIT // 2**20} MiB)"
        ),
    )

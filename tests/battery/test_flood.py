"""A flood of findings: 50,000 advisory locks all past their budget, and HTTP
readers hammering the status page, the lock API and /metrics while lockwatch
polls. Its own counters must show every poll on time, /healthz must stay 200,
and the state file must stay small and untouched while nothing changes."""

from __future__ import annotations

import random
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests

from lockwatch.demo.pgcluster import LocalCluster
from tests.battery.conftest import Record
from tests.battery.probes import Observer, lateness
from tests.battery.test_load import HOLDER_SESSIONS, Holders
from tests.fixtures.postgres import PgDatabase, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config

pytestmark = [pytest.mark.pg, pytest.mark.slow]

LOCKS = 50_000
INTERVAL = 10.0  # the default: a poll under the readers took 5.1 s on the busy machine
# Intervals of polls watched under the readers: six were a minute of a test
# worker's time (13.8 s of CPU, the daemon's included) for two more polls'
# lateness; three are 10 s of readers fewer than four.
POLLS_WATCHED = 3
READERS = 8
# Every lock past its budget at the first poll that sees it, once its session
# was idle that long (an idle session took its locks before it went idle).
MAX_HOLD = 1.0
OVER_BUDGET = f"{{max_hold: {MAX_HOLD:g}s, orphan_after: 1h, convoy_waiters: 2, convoy_wait: 1s}}"
PATHS = ("/", "/api/v1/locks", "/metrics", "/api/v1/findings", "/healthz")
STATE_FILE_LIMIT = 2 * 2**20  # bytes; one entry per lock was 9 MB at 50,000


@dataclass
class Flooded:
    lockwatch: LockwatchProcess
    state: Path

    @property
    def pid(self) -> int:
        assert self.lockwatch.proc is not None
        return self.lockwatch.proc.pid


@contextmanager
def watching(
    db: PgDatabase, tmp_path: Path, interval: float, statement_timeout: float, locks: str
) -> Iterator[LockwatchProcess]:
    """A ``lockwatch run`` of target main polling every ``interval``, stopped
    (cleanly: exit 0) at the end."""
    port = free_port()
    extra = f"interval: {interval:g}s\nstatement_timeout: {statement_timeout:g}s"
    config = write_config(
        tmp_path, port, {"main": db.monitor_dsn}, locks=locks, extra={"main": extra}
    )
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    lockwatch.start()
    try:
        yield lockwatch
    finally:
        assert lockwatch.stop() == 0, lockwatch.log(whole=True)


@pytest.fixture
def flooded(battery_cluster: LocalCluster, tmp_path: Path) -> Iterator[Flooded]:
    with (
        closing(PgDatabase(battery_cluster)) as db,
        closing(Holders(db.admin_dsn)) as holders,
    ):
        holders.hold(1, LOCKS)
        # Else a daemon quick to start tells them an interval later.
        with closing(db.connect("idle-past")) as looker:
            wait_until(lambda: idle_past(looker, MAX_HOLD), message="holders idle past the budget")
        with watching(db, tmp_path, INTERVAL, 20, OVER_BUDGET) as lockwatch:
            yield Flooded(lockwatch, tmp_path / "state" / "target-main.json")


def idle_past(conn: psycopg.Connection[tuple[Any, ...]], seconds: float) -> bool:
    """Every other session on ``conn``'s database has been idle over ``seconds``
    (by the server's clock)."""
    row = conn.execute(
        "SELECT bool_and(clock_timestamp() - state_change > make_interval(secs => %s))"
        " FROM pg_stat_activity WHERE datname = current_database()"
        " AND pid <> pg_backend_pid()",
        (seconds,),
    ).fetchone()
    return bool(row and row[0])


def span(observer: Observer) -> float:
    """Seconds between the first and the last poll the scrapes saw."""
    stamps = observer.poll_stamps("main")
    return stamps[-1] - stamps[0] if stamps else 0.0


def polls_between(observer: Observer, first: float, last: float) -> int:
    """lockwatch_polls_total's rise from the poll started at ``first`` to the one at ``last``."""
    totals = {}
    for observation in observer.seen:
        stamp = observation.metrics.get(
            "lockwatch_last_successful_poll_timestamp_seconds", target="main"
        )
        totals[stamp] = observation.metrics.get("lockwatch_polls_total", target="main") or 0.0
    return int(totals[last] - totals[first])


class Readers:
    """``readers`` threads asking for ``paths`` in a random order as fast as
    they are answered, the lock API at random offsets below ``locks`` and its
    largest page; and, given a ``command``, one more thread running it in a
    loop (its exit codes counted under its name)."""

    def __init__(
        self,
        base: str,
        paths: tuple[str, ...] = PATHS,
        readers: int = READERS,
        locks: int = LOCKS,
        command: tuple[str, list[str]] | None = None,  # (name, argv)
    ) -> None:
        self.base = base
        self.paths = paths
        self.locks = locks
        self.statuses: Counter[tuple[str, int]] = Counter()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._read, args=(n,), daemon=True) for n in range(readers)
        ]
        if command is not None:
            self._threads.append(threading.Thread(target=self._run, args=command, daemon=True))

    def __enter__(self) -> Readers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def _read(self, n: int) -> None:
        chooser = random.Random(n)
        with requests.Session() as session:
            while not self._stop.is_set():
                path = self.paths[chooser.randrange(len(self.paths))]
                params = {}
                if path == "/api/v1/locks":
                    params = {"limit": "1000", "offset": str(chooser.randrange(self.locks))}
                try:
                    response = session.get(f"{self.base}{path}", params=params, timeout=60)
                    self.statuses[path, response.status_code] += 1
                except requests.RequestException as exc:
                    self.errors.append(f"{path}: {exc}")

    def _run(self, name: str, argv: list[str]) -> None:
        while not self._stop.is_set():
            done = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60)
            self.statuses[name, done.returncode] += 1
            if done.returncode != 0:
                self.errors.append(f"{name}: {done.stderr.strip()[-200:]}")


def test_readers_hammering_a_flood_of_findings_delay_no_poll(
    flooded: Flooded, battery: Record
) -> None:
    lockwatch = flooded.lockwatch
    # The flood is told per holding session: one finding each, counting its locks.
    told = wait_until(
        lambda: (
            len(about := [f for f in lockwatch.findings() if f["kind"] == "lock_held_too_long"])
            == HOLDER_SESSIONS
            and about
        ),
        timeout=120,
        message="the flood told as one finding per holding session",
    )
    counted = sum(f["evidence"]["held_keys"] for f in told)
    # The locks, and so the findings, stay as they are from here on.
    wait_until(flooded.state.exists, message="the state saved once")
    durable = flooded.state.stat()
    with (
        Readers(lockwatch.base) as readers,
        Observer(lockwatch.base, flooded.pid, every=0.25) as observer,
    ):
        # Half an interval short: polls on time start a few ms either side
        # of their slot, and the last one whole would often wait for the next.
        wait_until(
            lambda: span(observer) >= (POLLS_WATCHED - 0.5) * INTERVAL,
            timeout=POLLS_WATCHED * INTERVAL * 4,
            message=f"{POLLS_WATCHED} intervals of polls under the readers",
        )
    # Scrapes wait their turn with the readers' requests, so some polls go
    # unseen; lockwatch's own counter tells how many polls there were.
    stamps = observer.poll_stamps("main")
    late, _ = lateness(stamps, INTERVAL)
    polls = polls_between(observer, stamps[0], stamps[-1])
    slots = round((stamps[-1] - stamps[0]) / INTERVAL)
    missed = slots - polls
    durations = [
        o.metrics.get("lockwatch_last_poll_duration_seconds", target="main") or 0.0
        for o in observer.seen
    ]
    rss = max(o.footprint.rss_mb for o in observer.seen)
    state_bytes = sum(
        path.stat().st_size
        for path in (flooded.state, flooded.state.with_name(flooded.state.name + ".recent"))
        if path.exists()
    )
    scrapes = len(observer.seen)
    answered = sum(n for (_, status), n in readers.statuses.items() if status == 200)
    busy = sum(n for (_, status), n in readers.statuses.items() if status == 503)
    health = {status for (path, status) in readers.statuses if path == "/healthz"}

    assert counted == LOCKS, [f["evidence"]["held_keys"] for f in told]
    assert len({f["evidence"]["holder_pid"] for f in told}) == HOLDER_SESSIONS
    overruns = [line for line in lockwatch.log().splitlines() if "overran" in line]
    assert missed == 0, f"{polls} polls in {slots} slots: {stamps}; {overruns}"
    assert max(late) <= 0.1 * INTERVAL, f"polls late by {late}"
    assert not overruns, overruns
    assert health == {200}, readers.statuses
    assert not readers.errors, readers.errors[:5]
    assert answered > slots and scrapes > slots, readers.statuses  # readers were answered
    assert state_bytes < STATE_FILE_LIMIT
    # Nothing changed while the readers read: the durable file was not rewritten.
    assert flooded.state.stat().st_mtime_ns == durable.st_mtime_ns
    battery(
        "finding-flood",
        injected=(
            f"{LOCKS:,} advisory locks all past their budget; {READERS} clients reading "
            f"{', '.join(PATHS)} (the lock API at random offsets, limit 1000) without pause "
            f"over {len(stamps)} polls at {INTERVAL:g} s"
        ),
        did=(
            f"one lock_held_too_long finding for each of the {HOLDER_SESSIONS} holding "
            f"sessions, counting their {counted:,} locks; its lock query took {min(durations):.2f}-{max(durations):.2f} s; {answered:,} "
            f"answers, {busy:,} told to come back (503), {scrapes} of the observer's "
            f"scrapes answered; /healthz 200 throughout"
        ),
        intact=(
            f"yes: {polls} polls in {slots} slots (lockwatch_polls_total), the latest of "
            f"the {len(stamps)} seen started {1000 * max(late):.0f} ms "
            f"after its slot (bound {100 * INTERVAL:.0f} ms); RSS at most {rss:.0f} MB; "
            f"state file {state_bytes / 1024:.0f} KiB, not rewritten while nothing changed"
        ),
    )

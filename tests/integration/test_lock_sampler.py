"""The sampler asks for the last poll's sessions in the same round trip as the
locks; what it returns must not depend on that guess being right."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from functools import partial

import psycopg
import pytest

from lockwatch.sample.locks import PgLockSampler, RawSample
from tests.fixtures.postgres import PgDatabase, run_in_thread, session_alive, wait_until

pytestmark = pytest.mark.pg


@pytest.fixture
def sampler(pg: PgDatabase) -> Iterator[PgLockSampler]:
    sampler = PgLockSampler(pg.monitor_dsn)
    yield sampler
    sampler.close()


def fresh(pg: PgDatabase) -> RawSample:
    """A sample by a sampler that has never polled, so guesses nothing."""
    sampler = PgLockSampler(pg.monitor_dsn)
    try:
        return sampler.sample()
    finally:
        sampler.close()


def settled(pg: PgDatabase, *sessions: psycopg.Connection[tuple[object, ...]]) -> None:
    """Wait until each session's backend says it is idle, waiting for its client."""
    pids = [s.info.backend_pid for s in sessions]
    watcher = pg.connect("settled-watcher")
    wait_until(
        lambda: (
            watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)"
                " AND state = 'idle' AND wait_event = 'ClientRead'",
                (pids,),
            ).fetchone()
            == (len(pids),)
        ),
        message=f"sessions {pids} idle",
    )


def lock_pids(sample: RawSample) -> set[tuple[int, str]]:
    return {(lock.pid, lock.key.render()) for lock in sample.locks}


def test_sessions_that_let_go_drop_out_and_new_holders_come_in(
    pg: PgDatabase, sampler: PgLockSampler
) -> None:
    first, second = pg.connect("first"), pg.connect("second")
    first.execute("SELECT pg_advisory_lock(1)")
    assert set(sampler.sample().backends) == {first.info.backend_pid}

    first.execute("SELECT pg_advisory_unlock(1)")
    second.execute("SELECT pg_advisory_lock(2)")
    sample = sampler.sample()
    assert lock_pids(sample) == {(second.info.backend_pid, "2")}
    assert set(sample.backends) == {second.info.backend_pid}


def test_a_guessed_poll_gives_what_a_fresh_one_gives_along_a_blocking_chain(
    pg: PgDatabase, sampler: PgLockSampler
) -> None:
    setup = pg.connect("setup")
    setup.execute("CREATE TABLE jobs (id int PRIMARY KEY)")
    setup.execute("INSERT INTO jobs VALUES (1)")
    row_holder = pg.connect("row-holder", autocommit=False)
    row_holder.execute("UPDATE jobs SET id = 1 WHERE id = 1")
    lock_holder = pg.connect("lock-holder")
    lock_holder.execute("SELECT pg_advisory_lock(42)")
    sampler.sample()  # the guess: the lock holder alone, not yet waiting
    stuck = run_in_thread(lambda: lock_holder.execute("UPDATE jobs SET id = 1 WHERE id = 1"))
    wait_until(
        lambda: sampler.sample().backends[lock_holder.info.backend_pid].blocked_by,
        message="the lock holder waits on the row lock",
    )

    guessed, unguessed = sampler.sample(), fresh(pg)
    assert (
        set(guessed.backends)
        == set(unguessed.backends)
        == {
            lock_holder.info.backend_pid,
            row_holder.info.backend_pid,
        }
    )
    assert lock_pids(guessed) == lock_pids(unguessed)
    row_holder.rollback()
    stuck.join()


def test_a_holder_that_disconnects_leaves_no_trace(pg: PgDatabase, sampler: PgLockSampler) -> None:
    holder = pg.connect("holder")
    holder.execute("SELECT pg_advisory_lock(7)")
    pid = holder.info.backend_pid
    assert lock_pids(sampler.sample()) == {(pid, "7")}
    holder.close()
    wait_until(lambda: not session_alive(pg.admin_dsn, pid), message="the session is gone")
    sample = sampler.sample()
    assert sample.locks == ()
    assert sample.backends == {}


def test_a_fresh_poll_follows_a_chain_of_row_locks_one_step_at_a_time(pg: PgDatabase) -> None:
    setup = pg.connect("setup")
    setup.execute("CREATE TABLE steps (id int PRIMARY KEY)")
    setup.execute("INSERT INTO steps VALUES (1), (2)")
    tail = pg.connect("tail", autocommit=False)
    tail.execute("UPDATE steps SET id = 2 WHERE id = 2")
    middle = pg.connect("middle", autocommit=False)
    middle.execute("UPDATE steps SET id = 1 WHERE id = 1")
    middle_waits = run_in_thread(lambda: middle.execute("UPDATE steps SET id = 2 WHERE id = 2"))
    lock_holder = pg.connect("lock-holder")
    lock_holder.execute("SELECT pg_advisory_lock(42)")
    holder_waits = run_in_thread(
        lambda: lock_holder.execute("UPDATE steps SET id = 1 WHERE id = 1")
    )
    pids = [conn.info.backend_pid for conn in (lock_holder, middle, tail)]
    # Each session seen blocked from the start: nothing is guessed from a
    # poll that saw the chain, so every blocker past the first is a step.
    wait_until(
        lambda: set(fresh(pg).backends) == set(pids),
        message="the lock holder, its blocker and its blocker's blocker",
    )
    backends = fresh(pg).backends
    assert backends[pids[0]].blocked_by == (pids[1],)
    assert backends[pids[1]].blocked_by == (pids[2],)
    assert backends[pids[2]].blocked_by == ()
    tail.rollback()
    middle_waits.join()
    middle.rollback()
    holder_waits.join()


def test_every_bit_of_a_key_and_its_mode_comes_back_as_the_application_took_it(
    pg: PgDatabase, sampler: PgLockSampler
) -> None:
    holder = pg.connect("holder")
    bigints = (-1, -9218828629118414586, -(2**63), 2**63 - 1, 42)
    for key in bigints:
        holder.execute("SELECT pg_advisory_lock(%s::bigint)", (key,))
    holder.execute("SELECT pg_advisory_lock_shared(-7, 13)")
    holder.execute("SELECT pg_advisory_lock(2147483647, -2147483648)")
    waiter = pg.connect("waiter")
    waits = run_in_thread(lambda: waiter.execute("SELECT pg_advisory_lock(-7, 13)"))
    wait_until(
        lambda: any(not lock.granted for lock in sampler.sample().locks),
        message="the waiter queues on -7,13",
    )
    locks = {
        (lock.pid, lock.key.render(), lock.mode, lock.granted) for lock in sampler.sample().locks
    }
    mine, theirs = holder.info.backend_pid, waiter.info.backend_pid
    assert locks == {
        *((mine, str(key), "ExclusiveLock", True) for key in bigints),
        (mine, "-7,13", "ShareLock", True),
        (mine, "2147483647,-2147483648", "ExclusiveLock", True),
        (theirs, "-7,13", "ExclusiveLock", False),
    }
    holder.execute("SELECT pg_advisory_unlock_all()")
    waits.join()


def test_a_session_read_unchanged_is_the_same_backend_and_a_changed_one_is_new(
    pg: PgDatabase, sampler: PgLockSampler
) -> None:
    still, busy = pg.connect("still"), pg.connect("busy")
    still.execute("SELECT pg_advisory_lock(1)")
    busy.execute("SELECT pg_advisory_lock(2)")
    # A backend reports itself idle a moment after its client has the answer:
    # read them once they have settled, or the first read is of the moment before.
    settled(pg, still, busy)
    first = sampler.sample().backends
    again = sampler.sample().backends
    assert again[still.info.backend_pid] is first[still.info.backend_pid]
    assert again[busy.info.backend_pid] is first[busy.info.backend_pid]
    busy.execute("SELECT 'another statement'")
    settled(pg, still, busy)
    changed = sampler.sample().backends
    assert changed[still.info.backend_pid] is first[still.info.backend_pid]
    assert changed[busy.info.backend_pid] == fresh(pg).backends[busy.info.backend_pid]
    assert "another statement" in changed[busy.info.backend_pid].query


class Contenders:
    """Sessions that keep the lock manager's partition locks busy, as a
    server's clients and lockwatch's own targets do: two read pg_locks (all
    partitions, shared), two read pg_stat_activity (whose join locks the
    shared catalogs pg_database and pg_authid outside the fast path, so each
    queues on a partition behind the readers), all under ``name``."""

    def __init__(self, pg: PgDatabase, name: str) -> None:
        self.name = name
        self._stop = threading.Event()
        statements = ["SELECT count(*) FROM pg_locks"] * 2
        statements += ["SELECT count(*) FROM pg_stat_activity"] * 2
        self._loops = [
            run_in_thread(partial(self._loop, pg.connect(name), statement))
            for statement in statements
        ]

    def _loop(self, conn: psycopg.Connection[tuple[object, ...]], statement: str) -> None:
        named = self.name
        while not self._stop.is_set():
            if named != self.name:
                named = self.name
                conn.execute("SELECT set_config('application_name', %s, false)", (named,))
            conn.execute(statement.encode())

    def stop(self) -> None:
        self._stop.set()
        for loop in self._loops:
            loop.result()


def sessions_named(
    watcher: psycopg.Connection[tuple[object, ...]], name: str, *, waiting: bool = False
) -> int:
    """Sessions of application ``name`` (``waiting`` on the lock manager), as a
    superuser sees them."""
    row = watcher.execute(
        "SELECT count(*) FILTER (WHERE NOT %s OR wait_event = 'LockManager')"
        " FROM pg_stat_activity WHERE application_name = %s",
        (waiting, name),
    ).fetchone()
    assert row is not None
    return int(str(row[0]))


def test_the_lock_manager_waits_counted_are_the_servers_never_lockwatchs_own(
    pg: PgDatabase, sampler: PgLockSampler
) -> None:
    # 10,000 locks make each copy of the lock table long enough to queue behind.
    pg.connect("holder").execute(
        "SELECT count(pg_advisory_lock(k)) FROM generate_series(1, 10000) AS k"
    )
    watcher = pg.connect("watcher")
    contenders = Contenders(pg, "worker")
    # The looks alternate with the samples in this thread: the watcher is
    # never itself waiting while the sampler counts.
    seen = {"worker": 0, "lockwatch": 0}
    counts: list[int | None] = []

    def sampled() -> int | None:
        seen[contenders.name] += sessions_named(watcher, contenders.name, waiting=True) > 0
        counts.append(sampler.sample().lock_manager_waits)
        return counts[-1]

    try:
        wait_until(lambda: sampled() and seen["worker"], message="the server's sessions counted")
        contenders.name = "lockwatch"
        wait_until(lambda: sessions_named(watcher, "worker") == 0, message="contenders renamed")
        counts.clear()
        wait_until(
            lambda: sampled() is not None and seen["lockwatch"] >= 5 and len(counts) >= 30,
            timeout=60,
            message="lockwatch's own sessions seen waiting on the lock manager",
        )
    finally:
        contenders.stop()
    # Its own sessions queued there (the superuser saw them), and no reading counted one.
    assert set(counts) == {0}, counts
    assert fresh(pg).lock_manager_waits is not None

"""PostgreSQL restarted, killed, and gone silent behind a relay that drops every
byte, twice each, under one ``lockwatch run`` watching three targets: the
target at fault is down at its next poll and back by itself, the others keep
their schedule, and nothing leaks (sessions, threads, file descriptors)."""

from __future__ import annotations

import math
import re
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from psycopg.conninfo import make_conninfo

from lockwatch.daemon import PAST_LIMIT
from lockwatch.demo.pgbinaries import embedded_bin_dir
from lockwatch.demo.pgcluster import LocalCluster
from tests.battery.conftest import Record
from tests.battery.probes import (
    Footprint,
    Scrape,
    footprint,
    lockwatch_sessions,
    scrape,
    settled_footprint,
)
from tests.battery.relay import Relay
from tests.fixtures.postgres import (
    MONITOR_PASSWORD,
    MONITOR_USER,
    PgDatabase,
    free_port,
    wait_until,
)
from tests.fixtures.processes import LockwatchProcess, write_config

pytestmark = [pytest.mark.pg, pytest.mark.slow]

STEADY_INTERVAL = 0.5  # write_config's default
SPARE_INTERVAL = 1.0
SILENT_INTERVAL = 2.0
SILENT_STATEMENT_TIMEOUT = 0.25
CYCLES = 2


@dataclass
class Watched:
    lockwatch: LockwatchProcess
    steady: PgDatabase  # on the battery's server, watched as "steady" and, relayed, "silent"
    spare: LocalCluster  # the server restarted and killed
    relay: Relay

    def scrape(self) -> Scrape:
        return scrape(self.lockwatch.base)

    @property
    def pid(self) -> int:
        assert self.lockwatch.proc is not None
        return self.lockwatch.proc.pid

    def sessions(self) -> tuple[int, int]:
        """lockwatch's sessions: on the battery's server (steady and silent), on the spare."""
        return (
            lockwatch_sessions(self.steady.admin_dsn, self.steady.database),
            lockwatch_sessions(self.spare.dsn()),
        )


@pytest.fixture(scope="module")
def watched(
    battery_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Watched]:
    tmp_path = tmp_path_factory.mktemp("pg-faults")
    steady = PgDatabase(battery_cluster)
    relay = Relay((battery_cluster.host, battery_cluster.port))
    spare = LocalCluster(embedded_bin_dir())
    try:
        spare.start()
        spare.create_password_role(MONITOR_USER, MONITOR_PASSWORD, "pg_monitor")
        port = free_port()
        targets = {
            "steady": steady.monitor_dsn,
            "spare": spare.dsn(user=MONITOR_USER, password=MONITOR_PASSWORD),
            "silent": make_conninfo(steady.monitor_dsn, port=str(relay.port)),
        }
        extra = {
            "spare": f"interval: {SPARE_INTERVAL}s",
            "silent": f"interval: {SILENT_INTERVAL}s\n"
            f"statement_timeout: {SILENT_STATEMENT_TIMEOUT * 1000:g}ms",
        }
        config = write_config(tmp_path, port, targets, extra=extra)
        lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
        lockwatch.start()
        watched = Watched(lockwatch, steady, spare, relay)
        wait_until(
            lambda: all(watched.scrape().get("lockwatch_up", target=t) == 1 for t in targets),
            message="every target up",
        )
        yield watched
        assert lockwatch.stop() in (0, -signal.SIGKILL), lockwatch.log(whole=True)
    finally:
        spare.close()
        relay.close()
        steady.close()


@dataclass(frozen=True)
class Outage:
    polls_to_detect: int  # the target's polls finished from the fault to lockwatch_up 0
    detect_seconds: float
    recover_seconds: float  # from the server's return to lockwatch_up 1
    steady_polls: int  # the other target's polls meanwhile
    steady_slots: int  # ... and its interval slots
    sessions: tuple[int, int]
    footprint: Footprint


def outage(
    watched: Watched,
    target: str,
    inject: Callable[[], None],
    restore: Callable[[], None],
    ceiling: Footprint | None,
) -> Outage:
    """One fault and its repair, measured from outside."""
    before = watched.scrape()
    polls = before.get("lockwatch_polls_total", target=target) or 0
    steady = before.get("lockwatch_polls_total", target="steady") or 0
    started = time.monotonic()
    inject()
    down = wait_until(
        lambda: (now := watched.scrape()).get("lockwatch_up", target=target) == 0 and now,
        timeout=30,
        message=f"{target} down",
    )
    detected = time.monotonic()
    wait_until(
        lambda: watched.lockwatch.finding("target_down", target), message="target_down fires"
    )
    restore()
    restored = time.monotonic()
    wait_until(
        lambda: watched.scrape().get("lockwatch_up", target=target) == 1,
        timeout=30,
        message=f"{target} up again",
    )
    wait_until(
        lambda: watched.lockwatch.finding("target_down", target) is None,
        message="target_down resolves",
    )
    recovered = time.monotonic()
    steady_after = watched.scrape().get("lockwatch_polls_total", target="steady") or 0
    sessions = wait_until(
        lambda: (now := watched.sessions()) == (2, 1) and now,
        message="one session per target again",
    )
    settled = footprint(watched.pid) if ceiling is None else settled_footprint(watched.pid, ceiling)
    return Outage(
        polls_to_detect=int((down.get("lockwatch_polls_total", target=target) or 0) - polls),
        detect_seconds=detected - started,
        recover_seconds=recovered - restored,
        steady_polls=int(steady_after - steady),
        steady_slots=math.floor((recovered - started) / STEADY_INTERVAL),
        sessions=sessions,
        footprint=settled,
    )


def repeated(
    watched: Watched, target: str, inject: Callable[[], None], restore: Callable[[], None]
) -> list[Outage]:
    outages: list[Outage] = []
    for _ in range(CYCLES):
        ceiling = outages[0].footprint if outages else None
        outages.append(outage(watched, target, inject, restore, ceiling))
    return outages


def check_and_describe(outages: list[Outage], interval: float) -> tuple[str, str]:
    """The assertions every fault shares, and the row's last two cells."""
    first = outages[0].footprint
    for n, one in enumerate(outages, 1):
        # The poll that was running when the fault hit may still finish; the next one fails.
        assert one.polls_to_detect <= 2, f"fault {n}: {one.polls_to_detect} polls to notice"
        missed = one.steady_slots - one.steady_polls
        assert missed <= 1, f"fault {n}: the steady target missed {missed} of {one.steady_slots}"
        assert one.footprint.threads <= first.threads, f"threads grew: {first} -> {one.footprint}"
        assert one.footprint.fds <= first.fds, f"fds grew: {first} -> {one.footprint}"
    slowest = max(one.detect_seconds for one in outages)
    did = (
        f"lockwatch_up 0 and target_down by the poll after the fault "
        f"(at most {max(o.polls_to_detect for o in outages)} polls, {slowest:.1f} s = "
        f"{slowest / interval:.1f} intervals); up again "
        f"{max(o.recover_seconds for o in outages):.1f} s after the server, by itself"
    )
    missed = sum(max(0, o.steady_slots - o.steady_polls) for o in outages)
    slots = sum(o.steady_slots for o in outages)
    sessions = outages[-1].sessions
    intact = (
        f"yes: the steady target missed {missed} of {slots} poll slots; after each fault "
        f"{sessions[0] + sessions[1]} lockwatch sessions (one per target) and "
        + " / ".join(str(o.footprint) for o in outages)
    )
    return did, intact


def test_a_restarted_server_is_down_at_the_next_poll_and_back_by_itself(
    watched: Watched, battery: Record
) -> None:
    outages = repeated(watched, "spare", watched.spare.stop, watched.spare.start)
    did, intact = check_and_describe(outages, SPARE_INTERVAL)
    battery(
        "pg-restart",
        injected=f"pg_ctl stop -m fast, then start, {CYCLES} times; interval {SPARE_INTERVAL:g} s",
        did=did,
        intact=intact,
    )


def test_a_killed_server_is_down_at_the_next_poll_and_back_by_itself(
    watched: Watched, battery: Record
) -> None:
    outages = repeated(watched, "spare", watched.spare.kill, watched.spare.start)
    did, intact = check_and_describe(outages, SPARE_INTERVAL)
    battery(
        "pg-kill",
        injected=f"SIGKILL to the postmaster, then start (crash recovery), {CYCLES} times",
        did=did,
        intact=intact,
    )


def test_a_silent_server_is_down_within_two_intervals_and_back_by_itself(
    watched: Watched, battery: Record
) -> None:
    outages = repeated(watched, "silent", watched.relay.cut, watched.relay.mend)
    did, intact = check_and_describe(outages, SILENT_INTERVAL)
    # The poll that meets the silence is broken by the watchdog as its limit
    # passes (the main loop looks then), soon enough for two intervals: it
    # starts within one and fails within this of its start.
    said = re.findall(
        r"silent: cannot sample: poll did not answer within ([\d.]+)s", watched.lockwatch.log()
    )
    assert len(said) == CYCLES, watched.lockwatch.log()
    assert all(float(limit) + PAST_LIMIT < SILENT_INTERVAL for limit in said)
    battery(
        "pg-silent",
        injected=(
            f"a TCP relay stops forwarding, every socket left open, {CYCLES} times; "
            f"interval {SILENT_INTERVAL:g} s, statement_timeout {SILENT_STATEMENT_TIMEOUT:g} s"
        ),
        did=f"the watchdog breaks the poll after {said[0]} s; " + did,
        intact=intact + f"; {watched.relay.dropped_bytes} bytes dropped by the relay",
    )

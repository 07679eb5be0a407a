"""Faults around lockwatch itself: a notification receiver that hangs, refuses
and errors; a state dir that fills up or turns read-only; lockwatch killed
with SIGKILL mid-incident and started again."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import pytest

from lockwatch.demo.scenarios import ConvoyIncident, OrphanIncident
from tests.battery.conftest import Record
from tests.battery.probes import Observer, saved_keys
from tests.battery.relay import Relay
from tests.battery.report import soak
from tests.fixtures.evidence import keys_of, lock_of
from tests.fixtures.postgres import PgDatabase, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config
from tests.fixtures.standins import ChatStandin, Reply, add_telegram, telegram_flood

pytestmark = [pytest.mark.pg, pytest.mark.slow]

INTERVAL = 0.5  # write_config's
QUIET = "{max_hold: 1h, orphan_after: 1h, convoy_waiters: 2, convoy_wait: 1s}"
EAGER = "{max_hold: 2s, orphan_after: 2s, convoy_waiters: 2, convoy_wait: 1s}"
# One line per finding in a notification:
# "[firing] lock_convoy · critical · main · app/pid 1234 started 2026-12-02T07:00:01Z".
ENTRY = re.compile(r"^\[(firing|resolved|still firing)\] (\w+) · \w+ · \S+ · (.+)$", re.M)


def told(standin: ChatStandin) -> Counter[tuple[str, str, str]]:
    """How often each (state, kind, subject) was told in the messages delivered."""
    return Counter(
        # ENTRY has three groups, each always matched: the stubs cannot know it.
        cast(tuple[str, str, str], match.groups())
        for message in standin.delivered("telegram")
        for match in ENTRY.finditer(message.text)
    )


def sent(lockwatch: LockwatchProcess) -> float:
    return lockwatch.metric("lockwatch_notifications_sent_total", channel="ops") or 0


def pending(lockwatch: LockwatchProcess) -> float | None:
    return lockwatch.metric("lockwatch_notifications_pending", channel="ops")


# -- the receiver --------------------------------------------------------------


def test_a_receiver_that_hangs_refuses_and_errors_gets_every_message_once_and_polls_keep_pace(
    tmp_path: Path, battery_db: PgDatabase, battery: Record
) -> None:
    phase = 60.0 if soak() else 2.5  # seconds of hanging, then of refusing
    standin = ChatStandin()
    relay = Relay(("127.0.0.1", int(standin.base.rsplit(":", 1)[1])))
    port = free_port()
    config = write_config(tmp_path, port, {"main": battery_db.monitor_dsn}, locks=QUIET)
    add_telegram(config, standin, f"http://{relay.address}")
    with config.open("a") as more:
        # The relay drops every byte: nothing arrives, so sending again doubles
        # nothing (a receiver that processes and answers late: receiver-slow).
        more.write("  unanswered_retries: 1000\n")
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    first, second = (ConvoyIncident(battery_db.admin_dsn, key=key, waiters=2) for key in (42, 43))
    try:
        lockwatch.start()
        assert lockwatch.proc is not None
        with Observer(lockwatch.base, lockwatch.proc.pid) as observer:
            relay.cut()
            first.start()
            wait_until(
                lambda: lockwatch.metric("lockwatch_notification_errors_total", channel="ops"),
                message="a first attempt that hung until its read timeout",
            )
            wait_until(lambda: time.monotonic() > observer.seen[0].at + phase, timeout=phase + 30)
            relay.refuse()
            first.stop()
            wait_until(lambda: lockwatch.finding("lock_convoy", "main") is None, message="42 over")
            second.start()
            wait_until(lambda: lockwatch.finding("lock_convoy", "main"), message="convoy on 43")
            wait_until(
                lambda: time.monotonic() > observer.seen[0].at + 2 * phase, timeout=phase + 30
            )
            errors = lockwatch.metric("lockwatch_notification_errors_total", channel="ops") or 0
            waiting = pending(lockwatch)
            standin.reply(Reply(500, {"ok": False}), telegram_flood(1))
            relay.mend()
            wait_until(lambda: pending(lockwatch) == 0, timeout=120, message="outbox delivered")
            second.stop()
            wait_until(lambda: sent(lockwatch) == 4, timeout=60, message="43 resolved, told")
        missed, slots = observer.missed_polls("main", INTERVAL)
        rss = [o.footprint.rss_mb for o in observer.seen]
    finally:
        first.stop()
        second.stop()
        stopped = lockwatch.stop() if lockwatch.proc is not None else 0
        relay.close()
        standin.close()
    assert stopped == 0, lockwatch.log(whole=True)

    counts = told(standin)
    assert set(counts.values()) == {1}, f"told twice: {counts}"
    # The convoys on 42 and 43, each about its own holder: told firing and resolved once.
    states: dict[str, list[str]] = {}
    for state, _, subject in counts:
        states.setdefault(subject, []).append(state)
    assert sorted(sorted(told) for told in states.values()) == [["firing", "resolved"]] * 2
    statuses = Counter(r.status for r in standin.requests("telegram"))
    assert statuses[200] == 4 and statuses[500] == statuses[429] == 1
    assert missed <= 1, f"main missed {missed} of {slots} poll slots while deliveries failed"
    battery(
        "receiver-down",
        injected=(
            f"Telegram behind a relay: {phase:g} s dropping every byte (each attempt hangs to "
            f"its 1 s read timeout), {phase:g} s refusing connections, then a 500 and a "
            "429 retry_after 1; two convoys fire and resolve meanwhile"
        ),
        did=(
            f"{errors:.0f} failed attempts backing off, {waiting:.0f} messages kept in the "
            f"outbox; all delivered in order once the receiver answered"
        ),
        intact=(
            f"yes: 4 of 4 messages delivered, each finding told firing once and resolved once; "
            f"main missed {missed} of {slots} poll slots; RSS {min(rss):.0f}-{max(rss):.0f} MB"
        ),
    )


# -- the state dir -------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """``tmp_path/state``: a 256 KiB tmpfs of the test's own, so it can be filled
    and remounted read-only (root ignores file modes; a mount it cannot ignore)."""
    mount = tmp_path / "state"
    mount.mkdir()
    if os.geteuid() != 0:
        reason = "mounting a tmpfs for a full state dir needs root"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "lockwatch-battery", str(mount)], check=True
    )
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


def fill(directory: Path) -> Path:
    filler = directory / "filler"
    with filler.open("wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return filler


def remount(mount: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(mount)], check=True)


def test_a_full_or_read_only_state_dir_is_said_loudly_while_monitoring_goes_on(
    tmp_path: Path, small_disk: Path, battery_db: PgDatabase, battery: Record
) -> None:
    port = free_port()
    config = write_config(tmp_path, port, {"main": battery_db.monitor_dsn})
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    saved = small_disk / "target-main.json"
    holder = battery_db.connect("nightly-report")

    def hold_and_see(key: int) -> None:
        holder.execute("SELECT pg_advisory_lock(%s)", (key,))
        wait_until(
            lambda: any(lock["key"] == str(key) for lock in lockwatch.locks("main")),
            message=f"lock {key} seen",
        )
        wait_until(
            lambda: any(
                str(key) in keys_of(f)
                for f in lockwatch.findings()
                if f["kind"] == "lock_held_too_long"
            ),
            message=f"lock {key} held too long",
        )

    def write_errors() -> float:
        return lockwatch.metric("lockwatch_state_write_errors_total", target="main") or 0

    def phase(case: str, break_disk: str, reason: str, key: int, mend: Callable[[], None]) -> None:
        before = write_errors()
        polls = lockwatch.metric("lockwatch_polls_total", target="main") or 0
        hold_and_see(key)
        errors = wait_until(lambda: write_errors() > before and write_errors())
        said = wait_until(
            lambda: [line for line in lockwatch.log().splitlines() if reason in line],
            message=f"{reason} in the log",
        )
        assert " ERROR " in said[0] and "monitoring goes on" in said[0], said
        assert lockwatch.metric("lockwatch_up", target="main") == 1
        polled = (lockwatch.metric("lockwatch_polls_total", target="main") or 0) - polls
        mend()
        wait_until(lambda: str(key) in saved_keys(saved), message=f"lock {key} saved at last")
        again = wait_until(
            lambda: [ln for ln in lockwatch.log().splitlines() if "persisted to" in ln],
            message="the recovery is logged",
        )
        shown = {str(small_disk): "$STATE_DIR"}
        error = said[0].split("statefile: ", 1)[1]
        recovery = again[-1].split("statefile: ", 1)[1]
        for path, name in shown.items():
            error, recovery = error.replace(path, name), recovery.replace(path, name)
        battery(
            case,
            injected=f"{break_disk} while lockwatch runs; lock {key} taken and held too long",
            did=(
                f"kept polling ({polled:.0f} polls meanwhile, lockwatch_up 1) and fired "
                f"lock_held_too_long; logged once at ERROR: '{error}'; "
                f"lockwatch_state_write_errors_total +{errors - before:.0f}"
            ),
            intact=(
                f"yes: once writable again, '{recovery}', and lock {key} with its hold time "
                "is in the state file"
            ),
        )

    try:
        lockwatch.start()
        hold_and_see(1)
        wait_until(lambda: "1" in saved_keys(saved))

        filler = fill(small_disk)
        phase(
            "state-dir-full",
            "the state dir's filesystem filled up",
            "No space left",
            2,
            filler.unlink,
        )
        remount(small_disk, "ro")
        phase(
            "state-dir-readonly",
            "the state dir remounted read-only",
            "Read-only file",
            3,
            lambda: remount(small_disk, "rw"),
        )
    finally:
        stopped = lockwatch.stop() if lockwatch.proc is not None else 0
    assert stopped == 0, lockwatch.log(whole=True)


# -- lockwatch killed ------------------------------------------------------------


def test_lockwatch_killed_mid_incident_forgets_nothing_announces_nothing_twice_invents_no_hold(
    tmp_path: Path, battery_db: PgDatabase, battery: Record
) -> None:
    standin = ChatStandin()
    port = free_port()
    config = write_config(tmp_path, port, {"main": battery_db.monitor_dsn}, locks=EAGER)
    add_telegram(config, standin, standin.telegram_api)
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    convoy = ConvoyIncident(battery_db.admin_dsn, waiters=2)
    orphan = OrphanIncident(battery_db.admin_dsn)
    kinds = {
        ("lock_convoy", "42"),
        ("lock_held_too_long", "42"),
        ("lock_orphaned", "42"),
        ("lock_held_too_long", "7,13"),
        ("lock_orphaned", "7,13"),
    }

    def findings() -> dict[tuple[str, str], str]:
        return {(f["kind"], lock_of(f) or ""): f["since"] for f in lockwatch.findings()}

    def settled() -> dict[tuple[str, str], str] | None:
        """The findings, if the next poll left them as they were."""
        earlier = findings()
        lockwatch.wait_polls(1)
        return earlier if findings() == earlier else None

    def held() -> dict[str, float]:
        return {lock["key"]: lock["hold_seconds"] for lock in lockwatch.locks("main")}

    try:
        lockwatch.start()
        convoy.start()
        orphan.start()
        before = wait_until(
            lambda: (now := findings()).keys() >= kinds and now, message="every finding fired"
        )
        wait_until(lambda: pending(lockwatch) == 0 and sent(lockwatch), message="all told")
        # A finding's since can still move earlier at the next poll (a waiter's
        # waitstart is NULL for a moment after its wait began, so it is first
        # dated by the poll that saw it): judge the restart against findings
        # that two polls in a row agreed on.
        before = wait_until(settled, message="the findings settled")
        told_before = told(standin)
        holds_before = held()
        killed = time.monotonic()
        lockwatch.kill()

        lockwatch.start()
        wait_until(lambda: lockwatch.metric("lockwatch_polls_total", target="main"))
        lockwatch.wait_polls(4)  # a few polls after the restart
        gap = time.monotonic() - killed
        after = findings()
        holds_after = held()
        told_after = told(standin)
        log_after = lockwatch.log()

        convoy.stop()
        orphan.stop()
        wait_until(lambda: not findings(), message="everything resolves")
        wait_until(lambda: pending(lockwatch) == 0, message="resolutions told")
        told_end = told(standin)
    finally:
        convoy.stop()
        orphan.stop()
        stopped = lockwatch.stop() if lockwatch.proc is not None else 0
        standin.close()
    assert stopped == 0, lockwatch.log(whole=True)

    forgotten = {k: v for k, v in before.items() if after.get(k) != v}
    assert not forgotten, f"findings forgotten or re-dated by the restart: {forgotten}"
    assert "firing " not in log_after, "a finding was announced again after the restart"
    assert told_after == told_before, "a notification was sent again after the restart"
    for key, seconds in holds_before.items():
        assert seconds <= holds_after[key] <= seconds + gap + 1, (key, seconds, holds_after[key])
    assert set(told_end.values()) == {1}, f"told twice: {told_end}"
    # The messages name each finding's holder; each kind was told resolved.
    resolved = {kind for state, kind, _ in told_end if state == "resolved"}
    assert resolved >= {kind for kind, _ in kinds}
    battery(
        "lockwatch-kill",
        injected=(
            f"SIGKILL to lockwatch during a convoy and an orphan ({len(before)} findings "
            f"firing, {sum(told_before.values())} told), started again {gap:.1f} s later"
        ),
        did=(
            f"restored {len(after)} findings with their since and {len(holds_after)} hold times "
            "from the state dir; no firing logged or notified again; resolved each once later"
        ),
        intact=(
            "yes: 0 findings forgotten, 0 told twice, hold times grew by "
            + ", ".join(f"{holds_after[k] - v:.1f} s" for k, v in sorted(holds_before.items()))
            + f" over a {gap:.1f} s gap (none invented)"
        ),
    )

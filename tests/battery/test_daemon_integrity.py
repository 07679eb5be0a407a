"""lockwatch's own integrity in the big incident: a DSN whose password would be
misread, one state dir shared by two instances, a state file that cannot be
read, the per-kind cap reshuffling, a target removed by SIGHUP."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import psycopg.conninfo
import pytest
import requests

from lockwatch.demo.pgcluster import LocalCluster
from tests.battery.conftest import Record
from tests.fixtures.postgres import MONITOR_USER, PgDatabase, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config
from tests.fixtures.standins import ChatStandin, add_telegram

pytestmark = [pytest.mark.pg, pytest.mark.slow]


def lockwatch_command(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lockwatch", *args],
        check=False,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )


def refused_run(config: Path, log: Path) -> tuple[int | None, str]:
    """``lockwatch run`` that should refuse to start: its exit code (None when it
    was still running after a generous wait) and everything it wrote."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lockwatch", "run", "-c", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        try:
            code: int | None = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            code = None
            proc.kill()
            proc.wait(timeout=10)
    return code, log.read_text(errors="replace")


# -- case 14: an unencoded @ in a URI password ---------------------------------


def test_an_unencoded_at_in_a_dsn_password_is_refused_and_short_passwords_garble_nothing(
    tmp_path: Path, battery_cluster: LocalCluster, battery_db: PgDatabase, battery: Record
) -> None:
    host, port = battery_cluster.host, battery_cluster.port
    user = "lw_at_" + uuid.uuid4().hex[:8]
    battery_cluster.create_password_role(user, "Wr@ngPW", "pg_monitor")
    database = battery_db.database
    misread = f"postgresql://{user}:Wr@ngPW@{host}:{port}/{database}"
    encoded = f"postgresql://{user}:Wr%40ngPW@{host}:{port}/{database}"
    short = psycopg.conninfo.make_conninfo(battery_db.monitor_dsn, password="1")

    bad = tmp_path / "bad"
    bad.mkdir()
    config = write_config(bad, free_port(), {"main": misread})
    checked = lockwatch_command("check-config", str(config))
    said = checked.stdout + checked.stderr
    assert checked.returncode != 0, f"check-config accepted the misread DSN: {said}"
    assert "percent-encode the password" in said, said
    assert "ngPW" not in said, said
    code, started = refused_run(config, bad / "lockwatch.log")
    assert code not in (None, 0), f"lockwatch run started on the misread DSN: {started}"
    assert "percent-encode the password" in started, started
    assert "ngPW" not in started, started

    good = tmp_path / "good"
    good.mkdir()
    listen = free_port()
    config = write_config(good, listen, {"main": encoded, "short": short})
    lockwatch = LockwatchProcess(config, good / "lockwatch.log", listen)
    where = f"{MONITOR_USER}@{host}:{port}/{database}"
    try:
        lockwatch.start()
        down = wait_until(
            lambda: lockwatch.finding("target_down", "short"), message="short is down"
        )
        wait_until(lambda: lockwatch.metric("lockwatch_up", target="main") == 1)
        log = lockwatch.log()
        page = requests.get(f"{lockwatch.base}/", timeout=5).text
    finally:
        stopped = lockwatch.stop() if lockwatch.proc is not None else 0
    assert stopped == 0, lockwatch.log(whole=True)
    assert where in down["summary"], f"the short password garbled the message: {down['summary']}"
    assert any(where in line for line in log.splitlines() if "short" in line), log
    for output in (log, page, str(down)):
        assert "ngPW" not in output
    battery(
        "dsn-misread",
        injected=(
            "a URI DSN whose password has an unencoded @ (user:Wr@ngPW@host: libpq reads "
            "password Wr, host ngPW@host); a target whose wrong password is '1'"
        ),
        did=(
            "check-config and lockwatch run refuse the DSN: 'percent-encode the password' "
            f"(exit {checked.returncode} and {code}); the percent-encoded password connects; "
            f"the '1' target's target_down reads '{down['summary'][:90]}…'"
        ),
        intact=(
            "yes: the password's tail in no output (check-config, the log, the API, the page); "
            f"'{where.replace(database, '…')}' shown whole, not garbled by the short password"
        ),
    )


# -- case 8: a holder's finding turning critical ------------------------------------

CAPPED = "{max_hold: 1s, orphan_after: 1h, convoy_waiters: 5, convoy_wait: 1h}"
HOLDER_LOCKS = 101  # more than the per-kind cap that was (its reshuffle was this case)


def test_a_key_of_a_holder_turning_critical_turns_its_finding_critical_and_nothing_else(
    tmp_path: Path, battery_db: PgDatabase, battery: Record
) -> None:
    port = free_port()
    config = write_config(tmp_path, port, {"main": battery_db.monitor_dsn}, locks=CAPPED)
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    holder = battery_db.connect("nightly-report")
    waiter = battery_db.connect("webhook-worker")
    watcher = battery_db.connect("battery")

    def too_long() -> dict[str, tuple[str, int]]:
        return {
            f["subject"]["lock"]: (f["severity"], f["evidence"]["held_keys"])
            for f in lockwatch.findings()
            if f["kind"] == "lock_held_too_long"
        }

    def polls() -> float:
        return lockwatch.metric("lockwatch_polls_total", target="main") or 0

    try:
        lockwatch.start()
        holder.execute(
            "SELECT count(pg_advisory_lock(k)) FROM generate_series(1, %s) AS k", (HOLDER_LOCKS,)
        )

        def one_counting_all() -> dict[str, tuple[str, int]] | None:
            now = too_long()
            return now if [count for _, count in now.values()] == [HOLDER_LOCKS] else None

        before = wait_until(
            one_counting_all, message="every lock held too long, told as one finding about it"
        )
        # A session waits on the last key: the holder's finding turns critical.
        waiting = threading.Thread(
            target=lambda: waiter.execute("SELECT pg_advisory_lock(%s)", (HOLDER_LOCKS,)),
            daemon=True,
        )
        waiting.start()
        wait_until(
            lambda: (
                watcher.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                ).fetchone()
                == (1,)
            ),
            message="the waiter waits",
        )
        seen, offset = polls(), len(lockwatch.log())
        wait_until(lambda: polls() >= seen + 4, message="a few polls with the waiter")
        after = too_long()
        log = lockwatch.log()[offset:]
        holder.execute("SELECT pg_advisory_unlock_all()")
        waiting.join(timeout=30)
    finally:
        stopped = lockwatch.stop() if lockwatch.proc is not None else 0
    assert stopped == 0, lockwatch.log(whole=True)
    resolved = [line for line in log.splitlines() if "resolved lock_held_too_long" in line]
    assert not resolved, f"resolved while still held: {resolved}"
    fired = [line for line in log.splitlines() if "firing lock_held_too_long" in line]
    assert not fired, f"fired again: {fired}"
    ((subject, (severity, count)),) = after.items()
    assert (set(after), severity, count) == (set(before), "critical", HOLDER_LOCKS), after
    battery(
        "cap-reshuffle",
        injected=(
            f"{HOLDER_LOCKS} advisory locks held too long by one session (one finding about "
            f"it, {subject}); then a session waits on lock {HOLDER_LOCKS}, so that key turns "
            "critical"
        ),
        did=(
            "kept the one finding about the session, counting its "
            f"{HOLDER_LOCKS} locks, which turned critical; its subject depends on no key"
        ),
        intact="yes: 0 findings resolved while their locks were held; 0 fired again",
    )


# -- case 9: a target removed ------------------------------------------------------

# "[firing] lock_held_too_long · warning · second · t_…/5"
TOLD = re.compile(r"^\[(firing|resolved|still firing)\] (\w+) · \w+ · (\S+) · (.+)$", re.M)


def told_about(standin: ChatStandin, target: str) -> list[str]:
    """The states told about ``target``'s findings, in the order delivered."""
    return [
        match.group(1)
        for message in standin.delivered("telegram")
        for match in TOLD.finditer(message.text)
        if match.group(3) == target
    ]


def test_a_target_removed_by_reload_or_while_stopped_is_resolved_once(
    tmp_path: Path, battery_cluster: LocalCluster, battery_db: PgDatabase, battery: Record
) -> None:
    second = PgDatabase(battery_cluster)
    standin = ChatStandin()
    port = free_port()
    both = {"main": battery_db.monitor_dsn, "second": second.monitor_dsn}

    def configure(targets: dict[str, str]) -> Path:
        config = write_config(tmp_path, port, targets)
        add_telegram(config, standin)
        with config.open("a") as more:
            more.write("  repeat_interval: 1s\n")
        return config

    lockwatch = LockwatchProcess(configure(both), tmp_path / "lockwatch.log", port)
    holder = second.connect("nightly-report")

    def polls_pass(count: int) -> None:
        seen = lockwatch.metric("lockwatch_polls_total", target="main") or 0
        wait_until(
            lambda: (lockwatch.metric("lockwatch_polls_total", target="main") or 0) >= seen + count,
            message=f"{count} more polls of main",
        )

    try:
        lockwatch.start()
        holder.execute("SELECT pg_advisory_lock(5)")
        wait_until(lambda: "firing" in told_about(standin, "second"), message="second fired")
        wait_until(lambda: "still firing" in told_about(standin, "second"), message="a reminder")
        configure({"main": battery_db.monitor_dsn})
        lockwatch.reload()
        wait_until(
            lambda: "resolved" in told_about(standin, "second"),
            timeout=20,
            message="second resolved after its removal by reload",
        )
        polls_pass(6)  # 3 s: three reminder intervals
        after_reload = told_about(standin, "second")
        reload_log = lockwatch.log()
        # Lock 5 is still held: nobody saw it released, so nothing says "resolved".
        headlines = [
            message.text.splitlines()[0]
            for message in standin.delivered("telegram")
            if "second" in message.text
        ]

        configure(both)
        lockwatch.reload()
        wait_until(lambda: told_about(standin, "second").count("firing") == 2, message="re-added")
        stopped = lockwatch.stop()
        configure({"main": battery_db.monitor_dsn})
        lockwatch.start()
        wait_until(
            lambda: told_about(standin, "second").count("resolved") == 2,
            timeout=20,
            message="second resolved after its removal while lockwatch was stopped",
        )
        polls_pass(6)
        after_restart = told_about(standin, "second")
        restart_log = lockwatch.log()
        restart_headlines = [
            message.text.splitlines()[0]
            for message in standin.delivered("telegram")
            if "second" in message.text
        ][len(headlines) :]
    finally:
        final = lockwatch.stop() if lockwatch.proc is not None else 0
        standin.close()
        second.close()
    assert stopped == final == 0, lockwatch.log(whole=True)
    resolved_at = after_reload.index("resolved")
    assert after_reload[resolved_at:] == ["resolved"], f"told after its removal: {after_reload}"
    assert after_restart[after_restart.index("resolved", resolved_at + 1) :] == ["resolved"], (
        after_restart
    )
    assert re.search(r"resolved lock_held_too_long second/", reload_log), reload_log
    assert any("NO LONGER WATCHED" in line for line in headlines), headlines
    assert not any("RESOLVED" in line for line in headlines), headlines
    # Removed while lockwatch was stopped: no more seen to end than by a reload.
    assert any("NO LONGER WATCHED" in line for line in restart_headlines), restart_headlines
    assert not any("RESOLVED" in line for line in restart_headlines), restart_headlines
    said = [line for line in restart_log.splitlines() if "no longer configured" in line]
    assert said, restart_log
    battery(
        "target-removed",
        injected=(
            "a target with lock 5 held too long (told firing, reminded every 1 s) is removed "
            "from the config by SIGHUP; re-added, it fires again, and is removed while "
            "lockwatch is stopped"
        ),
        did=(
            "on the reload: its findings resolved, logged and told once, its incident told "
            "'NO LONGER WATCHED' (lock 5 still held: not 'RESOLVED'); on the restart: "
            f"'{said[0].split(': ', 1)[1]}', told 'NO LONGER WATCHED' once"
        ),
        intact=(
            f"yes: {after_restart.count('resolved')} resolutions for 2 removals, 0 reminders "
            f"after either over 6 polls (before: reminded forever, dropped without a word)"
        ),
    )


# -- case 15: two instances on one state dir --------------------------------------


def test_a_second_lockwatch_on_the_same_state_dir_refuses_to_start_naming_the_first(
    tmp_path: Path, battery_db: PgDatabase, battery: Record
) -> None:
    standin = ChatStandin()
    port = free_port()
    config = write_config(tmp_path, port, {"main": battery_db.monitor_dsn})
    add_telegram(config, standin)
    first = LockwatchProcess(config, tmp_path / "first.log", port)
    # The same config on another port: only the state dir is shared.
    other, other_port = tmp_path / "other.yml", free_port()
    other.write_text(config.read_text().replace(f":{port}\n", f":{other_port}\n", 1))
    holder = battery_db.connect("nightly-report")
    try:
        first.start()
        assert first.proc is not None
        holder.execute("SELECT pg_advisory_lock(9)")
        wait_until(lambda: standin.delivered("telegram"), message="lock 9 told")
        code, said = refused_run(other, tmp_path / "second.log")
        wait_until(lambda: (first.metric("lockwatch_polls_total", target="main") or 0) > 4)
        messages = len(standin.delivered("telegram"))
        first_up = first.proc.poll() is None
        first.kill()
        # Killed, the first leaves no lock behind: the second starts now.
        second = LockwatchProcess(other, tmp_path / "second-again.log", other_port)
        second.start()
        restarted = second.stop()
    finally:
        if first.proc is not None:
            first.stop()
        standin.close()
    assert first.proc is not None
    assert code not in (None, 0), f"a second lockwatch ran on the same state dir: {said}"
    assert str(first.proc.pid) in said and "state dir" in said, said
    assert first_up and messages == 1, (first_up, messages)
    assert restarted == 0
    refusal = next(line for line in said.splitlines() if "state dir" in line)
    refusal = refusal.replace(str(tmp_path / "state"), "$STATE_DIR")
    refusal = refusal.replace(str(first.proc.pid), "N")
    battery(
        "state-dir-shared",
        injected=(
            "a second lockwatch started on the state dir of a running one (another port), "
            "during a finding; then the first SIGKILLed and the second started again"
        ),
        did=(
            f"the second exited {code}: '{refusal.split('lockwatch: ', 1)[-1]}'; after the "
            "first was killed it started at once (the kernel drops the lock with the process)"
        ),
        intact=(f"yes: the finding told {messages} time (not doubled), the first kept polling"),
    )


# -- case 16: a state file that cannot be read -------------------------------------

UNREADABLE = {
    # nested deeper than any parser's recursion: json.loads raises RecursionError
    "target-main.json": b"[" * 200_000,
    # well-formed JSON whose hold has a pid of 1e999 (inf, which no int can hold)
    "target-second.json": (
        b'{"version": 1, "holds": {"saved_at": "2026-01-01T00:00:00+00:00", "locks": '
        b'[{"key": "1", "pid": 1e999, "backend_start": "x", "database": "d", "mode": "m", '
        b'"granted": true, "first_seen": "2026-01-01T00:00:00+00:00"}]}, "findings": []}'
    ),
    # not UTF-8 at all
    "notify-ops.json": b"\xff\xfe\x00{" * 64,
}
# What a kill during a write leaves: NamedTemporaryFile's names next to the file.
LEFTOVERS = (".target-main.json.k3j_x9q2", ".notify-ops.json.a8b7c6d5")


def test_state_files_that_cannot_be_read_are_moved_aside_and_lockwatch_starts_fresh(
    tmp_path: Path, battery_cluster: LocalCluster, battery_db: PgDatabase, battery: Record
) -> None:
    second = PgDatabase(battery_cluster)
    standin = ChatStandin()
    port = free_port()
    targets = {"main": battery_db.monitor_dsn, "second": second.monitor_dsn}
    config = write_config(tmp_path, port, targets)
    add_telegram(config, standin)
    state = tmp_path / "state"
    state.mkdir()
    for name, content in UNREADABLE.items():
        (state / name).write_bytes(content)
    for name in LEFTOVERS:
        (state / name).write_text('{"version": 1, "hol')
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    holder = battery_db.connect("nightly-report")
    try:
        lockwatch.start()
        holder.execute("SELECT pg_advisory_lock(11)")
        wait_until(lambda: standin.delivered("telegram"), message="lock 11 told")
        wait_until(
            lambda: '"11"' in (state / "target-main.json").read_text(errors="replace"),
            message="the fresh state saved",
        )
        wait_until(lambda: lockwatch.metric("lockwatch_up", target="second") == 1)
        log = lockwatch.log()
    finally:
        stopped = lockwatch.stop() if lockwatch.proc is not None else 0
        standin.close()
        second.close()
    assert stopped == 0, lockwatch.log(whole=True)
    left = sorted(p.name for p in state.iterdir() if p.name in LEFTOVERS)
    assert not left, f"temporary files left: {left}"
    said = {name: [ln for ln in log.splitlines() if f"{name} " in ln] for name in UNREADABLE}
    for name, content in UNREADABLE.items():
        assert len(said[name]) == 1 and "moved aside" in said[name][0], (name, log)
        aside = [p for p in state.iterdir() if p.name.startswith(f"{name}.unreadable")]
        assert [p.read_bytes() for p in aside] == [content], name
    reasons = [said[name][0].split("statefile: ", 1)[-1] for name in UNREADABLE]
    battery(
        "state-unreadable",
        injected=(
            "state files a parser chokes on: JSON nested 200,000 deep, a hold with pid 1e999, "
            "bytes that are not UTF-8; 2 temporary files as a kill mid-write leaves them"
        ),
        did=(
            "started fresh and watched both targets; one line each: "
            + "; ".join(f"'{r.replace(str(state), '$STATE_DIR')}'" for r in reasons)
            + "; the temporary files removed at start"
        ),
        intact=(
            f"yes: each file kept whole beside it ({len(UNREADABLE)} of {len(UNREADABLE)}); "
            "the new finding told once and saved"
        ),
    )

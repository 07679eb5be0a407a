"""lockwatch through a role granted only CONNECT (no pg_monitor), beside one with
pg_monitor, on the same server and the same holders: an application role's
sessions over TCP from 127.0.0.1 and over the Unix socket. The weak role sees
their pid, user and application_name and NULL for everything else; lockwatch
must say so at once everywhere, show those facts as hidden and judge none."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests
from psycopg import sql

from lockwatch.commands.doctor import EXIT_NO_MONITOR, EXIT_SAFE
from lockwatch.commands.snapshot import EXIT_BLIND
from lockwatch.model.locks import HIDDEN
from tests.battery.conftest import Record
from tests.fixtures.evidence import lock_of
from tests.fixtures.postgres import PgDatabase, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config

pytestmark = [pytest.mark.pg, pytest.mark.slow]

WEAK_USER = "lockwatch_connect_only"
WEAK_PASSWORD = "weak-role-pw"  # a throwaway role on a test server
APP_USER = "app"
# max_hold 2s: every held lock becomes a lock_held_too_long, whose evidence names
# its holder. tcp-only allows 127.0.0.0/8 (its holder is there); local-only
# allows the Unix socket alone (its holder comes over TCP); idle-socket's holder
# sits idle past orphan_after.
LOCKS = (
    "locks: {max_hold: 2s, orphan_after: 1h, named: ["
    "{name: tcp-only, key: 501, allowed_holders: {addresses: ['127.0.0.0/8']}},"
    "{name: local-only, key: 502, allowed_holders: {addresses: [local]}},"
    "{name: idle-socket, key: 503, orphan_after: 1s}]}"
)


@pytest.fixture
def holders(battery_db: PgDatabase) -> Iterator[dict[str, psycopg.Connection[Any]]]:
    """The application's sessions, as role ``app``: two over TCP, one over the socket."""
    server = battery_db.server
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        for role in (APP_USER, WEAK_USER):
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(APP_USER)))
        socket_dir = str(admin.execute("SHOW unix_socket_directories").fetchone()[0])  # type: ignore[index]
    server.create_password_role(WEAK_USER, WEAK_PASSWORD)
    with psycopg.connect(battery_db.admin_dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("REVOKE CONNECT ON DATABASE {} FROM PUBLIC").format(
                sql.Identifier(battery_db.database)
            )
        )
        admin.execute(
            sql.SQL("GRANT CONNECT ON DATABASE {} TO {}, {}, {}").format(
                sql.Identifier(battery_db.database),
                sql.Identifier(WEAK_USER),
                sql.Identifier(APP_USER),
                sql.Identifier(battery_db.monitor_user),
            )
        )
    tcp = server.dsn(dbname=battery_db.database, user=APP_USER)
    local = psycopg.conninfo.make_conninfo(tcp, host=socket_dir)
    sessions = {
        "tcp-a": psycopg.connect(tcp, application_name="report-tcp-a", autocommit=True),
        "tcp-b": psycopg.connect(tcp, application_name="report-tcp-b", autocommit=True),
        "socket": psycopg.connect(local, application_name="report-socket", autocommit=True),
    }
    try:
        yield sessions
    finally:
        for conn in sessions.values():
            conn.close()


def _weak_dsn(battery_db: PgDatabase) -> str:
    return battery_db.server.dsn(dbname=battery_db.database, user=WEAK_USER, password=WEAK_PASSWORD)


def _by(findings: list[dict[str, Any]], target: str) -> dict[tuple[str, str | None], Any]:
    return {(f["kind"], lock_of(f)): f for f in findings if f["target"] == target}


def test_a_role_without_pg_monitor_says_so_and_judges_nothing_hidden(
    tmp_path: Path,
    battery_db: PgDatabase,
    holders: dict[str, psycopg.Connection[Any]],
    battery: Record,
) -> None:
    weak = _weak_dsn(battery_db)
    port = free_port()
    config = write_config(
        tmp_path,
        port,
        {"weak": weak, "seeing": battery_db.monitor_dsn},
        extra={"weak": LOCKS, "seeing": LOCKS},
    )
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    holders["tcp-a"].execute("SELECT pg_advisory_lock(501)")
    holders["tcp-b"].execute("SELECT pg_advisory_lock(502)")
    holders["socket"].execute("SELECT pg_advisory_lock(503)")
    try:
        lockwatch.start()
        wait_until(
            lambda: (
                {("lock_orphaned", "idle-socket"), ("lock_held_too_long", "tcp-only")}
                <= set(_by(lockwatch.findings(), "seeing"))
                and ("lock_held_too_long", "tcp-only") in _by(lockwatch.findings(), "weak")
            ),
            timeout=60,
            message="both targets judged the holders",
        )
        polls = lockwatch.metric("lockwatch_polls_total", target="weak") or 0
        wait_until(
            lambda: (lockwatch.metric("lockwatch_polls_total", target="weak") or 0) >= polls + 4,
            message="a few more polls of the weak target",
        )
        findings = lockwatch.findings()
        sees = {
            t: lockwatch.metric("lockwatch_target_can_see_sessions", target=t)
            for t in ("weak", "seeing")
        }
        page = requests.get(f"{lockwatch.base}/", timeout=10).text
        log = lockwatch.log()
    finally:
        stopped = lockwatch.stop() if lockwatch.proc is not None else 0
    assert stopped == 0, lockwatch.log(whole=True)
    weak_found, seeing_found = _by(findings, "weak"), _by(findings, "seeing")

    # Said at once: a finding on the target, a metric, a log line, the status page.
    privileges = weak_found[("target_privileges_missing", None)]
    assert privileges["evidence"]["role"] == WEAK_USER
    assert privileges["evidence"]["grant"] == f"GRANT pg_monitor TO {WEAK_USER}"
    assert ("target_privileges_missing", None) not in seeing_found
    assert sees == {"weak": 0.0, "seeing": 1.0}, sees
    said = [line for line in log.splitlines() if "lockwatch.sample.session" in line]
    assert len(said) == 1 and WEAK_USER in said[0], said
    assert (
        f"other roles&#x27; sessions {HIDDEN}" in page or f"other roles' sessions {HIDDEN}" in page
    )

    # Evidence says hidden, never "local socket" or an unknown state.
    held = weak_found[("lock_held_too_long", "tcp-only")]
    holder = held["evidence"]["holders"][0]
    assert (holder["client_addr"], holder["state"], holder["query"]) == (HIDDEN,) * 3, holder
    assert holder["application_name"] == "report-tcp-a"
    assert HIDDEN in held["summary"] and "local socket" not in held["summary"], held["summary"]
    seen_holder = seeing_found[("lock_held_too_long", "tcp-only")]["evidence"]["holders"][0]
    assert seen_holder["client_addr"] == "127.0.0.1", seen_holder

    # Nothing judged on hidden facts: no false stranger from 127.0.0.1, no orphan
    # or stranger guessed; the seeing role judges the same holders.
    weak_judged = sorted(
        k
        for k in weak_found
        if k[0] in ("lock_unexpected_holder", "lock_orphaned", "lock_pooled_session")
    )
    assert weak_judged == [], weak_judged
    assert ("lock_unexpected_holder", "tcp-only") not in seeing_found
    assert ("lock_unexpected_holder", "local-only") in seeing_found
    assert ("lock_orphaned", "idle-socket") in seeing_found

    # snapshot says it first; doctor --monitoring (lockwatch's own DSN) exits
    # non-zero for the weak role only.
    shot = _lockwatch("snapshot", "--dsn", weak)
    doctor_weak = _lockwatch("doctor", "--monitoring", "--dsn", weak)
    doctor_seeing = _lockwatch("doctor", "--monitoring", "--dsn", battery_db.monitor_dsn)
    assert shot.returncode == EXIT_BLIND, shot.stderr  # it cannot see: never a plain 0
    first = shot.stdout.splitlines()[0]
    assert first.startswith(f"WARNING: role {WEAK_USER} lacks pg_monitor"), shot.stdout
    assert "local socket" not in shot.stdout and HIDDEN in shot.stdout, shot.stdout
    assert doctor_weak.returncode == EXIT_NO_MONITOR, doctor_weak.stdout + doctor_weak.stderr
    assert doctor_seeing.returncode == EXIT_SAFE, doctor_seeing.stdout + doctor_seeing.stderr
    battery(
        "weak-role",
        injected=(
            "lockwatch's role granted only CONNECT (no pg_monitor) beside a pg_monitor one; "
            "an application role holds locks over TCP from 127.0.0.1 (an allow-list "
            "127.0.0.0/8; a local-only lock) and over the socket (idle past orphan_after)"
        ),
        did=(
            "target_privileges_missing, lockwatch_target_can_see_sessions 0, one log line, "
            "a line under the target on the status page, snapshot's first line, doctor --monitoring exit "
            f"{EXIT_NO_MONITOR}; holders' address, state and query shown as '{HIDDEN}'"
        ),
        intact=(
            "yes: 0 findings judged on hidden facts (before: a false lock_unexpected_holder "
            "from 127.0.0.1, holders 'from local socket'); the pg_monitor role found the "
            "orphan and the TCP holder of the local-only lock"
        ),
    )


def _lockwatch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lockwatch", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_snapshot_that_cannot_see_other_roles_says_so_and_exits_non_zero(
    battery_db: PgDatabase, holders: dict[str, psycopg.Connection[Any]], battery: Record
) -> None:
    holders["tcp-a"].execute("SELECT pg_advisory_lock(601)")
    weak = _lockwatch("snapshot", "--dsn", _weak_dsn(battery_db))
    seeing = _lockwatch("snapshot", "--dsn", battery_db.monitor_dsn)
    assert weak.returncode == EXIT_BLIND, weak.stdout + weak.stderr
    assert "cannot see" in weak.stdout and "no problems seen\n" not in weak.stdout + "\n"
    assert seeing.returncode == 0, seeing.stdout + seeing.stderr
    assert seeing.stdout.rstrip().endswith("no problems seen")
    battery(
        "snapshot-blind",
        injected=(
            "lockwatch snapshot through a role granted only CONNECT (no pg_monitor) while "
            "another role's session holds an advisory lock; the same through a pg_monitor role"
        ),
        did=(
            f"exit {weak.returncode}: '{weak.stdout.strip().splitlines()[-1][:60]}…'; "
            f"with pg_monitor exit {seeing.returncode}: 'no problems seen'"
        ),
        intact="yes: a role that cannot see never says 'no problems seen' alone, nor exits 0",
    )

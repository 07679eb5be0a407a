"""The queue, job and target runbooks followed as written (``docs/runbooks.md``),
on Debian's PostgreSQL 15 watched by one real lockwatch: seed 002's webhook
queue stalled behind a worker hung in an HTTP call (worker processes, a
producer, a receiver that never answers), jobs run under ``lockwatch exec``
(twice for one run key, two at once, one past its limit, one failing, one
never started), a target whose password is wrong and one whose role lacks
pg_monitor. Each runbook's blocks run with the roles and DSNs they name, show
what their text says, and the fix ends the problem without touching the
others (the other workers, the other run).

Kinds: queue_growing, queue_stalled, job_duplicate_start, job_overlap,
job_too_long, job_failed, job_missed, target_down, target_privileges_missing."""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest
import requests

from lockwatch.demo.pgcluster import LocalCluster, free_port
from lockwatch.demo.scenarios import (
    WEBHOOK_JOBS_DDL,
    Blackhole,
    Producer,
    Receiver,
    webhook_queue_sql,
)
from tests.fixtures.paths import ROOT
from tests.fixtures.postgres import (
    MONITOR_PASSWORD,
    MONITOR_USER,
    advisory_holders,
    session_alive,
    wait_until,
)
from tests.fixtures.processes import LOOK, LockwatchProcess
from tests.fixtures.runbooks import (
    ONCALL_PASSWORD,
    Runbook,
    debian_cluster,
    json_values,
)
from tests.integration.test_queue_stall import Workers

pytestmark = [pytest.mark.pg, pytest.mark.slow]

STEPS = (
    ("queue_growing", "confirm"),
    ("queue_stalled", "confirm"),
    ("queue_stalled", "stop"),
    ("job_duplicate_start", "confirm"),
    ("job_overlap", "confirm"),
    ("job_overlap", "stop"),
    ("job_missed", "confirm"),
    ("job_missed", "stop"),
    ("job_too_long", "confirm"),
    ("job_too_long", "process"),
    ("job_too_long", "session"),
    ("job_too_long", "stop"),
    ("job_failed", "confirm"),
    ("job_failed", "stop"),
    ("target_down", "confirm"),
    ("target_down", "password"),
    ("target_privileges_missing", "confirm"),
    ("target_privileges_missing", "role"),
    ("target_privileges_missing", "fix"),
)
DOWN_PASSWORD = "pw-" + secrets.token_hex(8)  # the one in lockwatch's DSN for target down
BLIND_PASSWORD = "pw-" + secrets.token_hex(8)
TOKEN = "ping-" + secrets.token_hex(12)
TAG = uuid.uuid4().hex[:8]  # marks this module's worker processes' command lines
WINDOW = 6.0


@pytest.fixture(scope="module")
def server() -> Iterator[LocalCluster]:
    with debian_cluster() as server:
        server.create_password_role(MONITOR_USER, MONITOR_PASSWORD, "pg_monitor")
        server.create_password_role("lw_blind", BLIND_PASSWORD)
        server.create_password_role("lw_down", "not-" + DOWN_PASSWORD)
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            admin.execute(WEBHOOK_JOBS_DDL)
            admin.execute(f"GRANT SELECT ON webhook_jobs TO {MONITOR_USER}")
            admin.execute("CREATE ROLE app LOGIN")
            admin.execute("ALTER TABLE webhook_jobs OWNER TO app")
        yield server


class Watched:
    def __init__(self, daemon: LockwatchProcess, book: Runbook) -> None:
        self.daemon, self.book = daemon, book

    @property
    def base(self) -> str:
        return self.daemon.base

    def findings(self, kind: str, target: str = "app") -> list[dict[str, Any]]:
        return [f for f in self.daemon.findings() if f["kind"] == kind and f["target"] == target]

    def incident(self, kind: str, target: str = "app") -> dict[str, Any] | None:
        answer = requests.get(
            f"{self.base}/api/v1/incidents", params={"state": "open", "target": target}, timeout=5
        ).json()
        return next((i for i in answer["incidents"] if kind in i["kinds"]), None)


def config_text(server: LocalCluster, tmp: Path, port: int) -> str:
    files = {
        "app.dsn": server.dsn(user=MONITOR_USER, password=MONITOR_PASSWORD),
        "blind.dsn": server.dsn(user="lw_blind", password=BLIND_PASSWORD),
        "down.dsn": server.dsn(user="lw_down", password=DOWN_PASSWORD),
        "oncall.dsn": server.dsn(user="oncall", password=ONCALL_PASSWORD),
        "ping-token": TOKEN,
    }
    for name, text in files.items():
        (tmp / name).write_text(text + "\n")
    queue_sql = webhook_queue_sql(completed=True).replace("\n", " ")
    return (
        f"listen: 127.0.0.1:{port}\n"
        f"state_dir: {tmp / 'state'}\n"
        f"pings: {{token_file: {tmp / 'ping-token'}}}\n"
        "defaults: {interval: 300ms, connect_timeout: 2s, statement_timeout: 2s}\n"
        "targets:\n"
        "  - name: app\n"
        f"    dsn_file: {tmp / 'app.dsn'}\n"
        f"    actions: {{dsn_file: {tmp / 'oncall.dsn'}}}\n"
        "    locks: {max_hold: 1h, orphan_after: 1h, convoy_waiters: 2, convoy_wait: 1s}\n"
        "    queues:\n"
        "      - name: webhooks\n"
        f"        sql: {queue_sql!r}\n"
        f"        window: {WINDOW:g}s\n"
        "        min_growth: 0.2\n"
        "        stall_cpu: 0.2\n"
        "    workers:\n"
        "      - name: webhook-workers\n"
        "        queues: [webhooks]\n"
        f"        processes: {{cmdline: 'webhook_worker\\.py \\S+ {TAG}'}}\n"
        "        sessions: ['webhook-worker-*']\n"
        f"  - name: blind\n    dsn_file: {tmp / 'blind.dsn'}\n"
        "    locks: {max_hold: 1h, orphan_after: 1h}\n"
        f"  - name: down\n    dsn_file: {tmp / 'down.dsn'}\n"
        "jobs:\n"
        "  - {name: dup, target: app}\n"
        "  - {name: overlap, target: app}\n"
        "  - {name: long, target: app, max_duration: 1s}\n"
        "  - {name: failing, target: app}\n"
        "  - {name: missed, target: app, schedule: {cron: '* * * * *', grace: 1s}}\n"
    )


@pytest.fixture(scope="module")
def watched(server: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Watched]:
    tmp = tmp_path_factory.mktemp("runbooks-jobs")
    oncall = server.dsn(user="oncall", password=ONCALL_PASSWORD)
    book = Runbook(
        {
            "superuser": server.dsn(),
            "oncall": oncall,
            # lockwatch's role on the target the step is about: the one lacking pg_monitor
            "monitor": server.dsn(user="lw_blind", password=BLIND_PASSWORD),
        }
    )
    book.sql("tools", "oncall-role", password=ONCALL_PASSWORD)
    port = free_port()
    config = tmp / "lockwatch.yml"
    config.write_text(config_text(server, tmp, port))
    daemon = LockwatchProcess(config, tmp / "lockwatch.log", port)
    daemon.start()
    book.config, book.listen = config, f"127.0.0.1:{port}"
    book.env.update(
        DSN=server.dsn(user=MONITOR_USER, password=MONITOR_PASSWORD),
        APP_DSN=server.dsn(user="app"),
        ONCALL_DSN=oncall,
        LOCKWATCH_PING_TOKEN=TOKEN,
    )
    try:
        yield Watched(daemon, book)
    finally:
        daemon.stop()


class Runs:
    """Jobs run under ``lockwatch exec``, as cron would, stopped at the test's end."""

    def __init__(self, watched: Watched) -> None:
        self.watched = watched
        self.wrappers: list[subprocess.Popen[str]] = []

    def start(self, job: str, *command: str, run_key: str | None = None) -> subprocess.Popen[str]:
        args = ["lockwatch", "exec", "--job", job, "--url", self.watched.base]
        if run_key is not None:
            args += ["--run-key", run_key]
        wrapper = subprocess.Popen(
            [*args, "--", *command],
            env={**self.watched.book.env, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.wrappers.append(wrapper)
        return wrapper

    def stop(self) -> None:
        for wrapper in self.wrappers:
            if wrapper.poll() is None:
                wrapper.send_signal(signal.SIGTERM)
            wrapper.communicate(timeout=30)


@pytest.fixture
def runs(watched: Watched) -> Iterator[Runs]:
    started = Runs(watched)
    yield started
    started.stop()


@pytest.fixture
def workers() -> Iterator[Workers]:
    """Seed 002's webhook worker processes (test_queue_stall's), stopped at the test's end."""
    started = Workers()
    yield started
    started.stop()


def worker_sessions(server: LocalCluster) -> set[int]:
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'webhook-worker-%'"
        ).fetchall()
    return {int(row[0]) for row in rows}


def test_seed_002_s_stalled_queue_is_confirmed_and_drained_by_ending_its_holder(
    server: LocalCluster, watched: Watched, workers: Workers
) -> None:
    book = watched.book
    blackhole, receiver = Blackhole(), Receiver()
    producer = Producer(server.dsn(), 4.0, lambda n: blackhole.url if n == 8 else receiver.url)
    try:
        for number in range(1, 7):
            workers.start(server.dsn(user="app"), f"webhook-worker-{number}", TAG)
        producer.start()
        wait_until(lambda: blackhole.accepted, message="a worker takes the poisoned job")
        wait_until(
            lambda: watched.findings("queue_stalled"), timeout=60, interval=LOOK, message="stalled"
        )
        wait_until(
            lambda: watched.findings("queue_growing"), timeout=60, interval=LOOK, message="growing"
        )
        (holder,) = advisory_holders(server.dsn(), 42)
        # The stall joins its holder's incident (with the convoy) once both are seen.
        incident = wait_until(
            lambda: (
                (found := watched.incident("queue_stalled")) is not None
                and found["root"]["pid"] == holder
                and found
            ),
            interval=LOOK,
            message="the stall in its holder's incident",
        )

        (growing,) = book.sh("queue_growing", "confirm")
        (grown,) = json_values(growing.out)
        assert grown["queue"] == "webhooks" and grown["depth"] > 0
        assert grown["growth_per_second"] >= 0.2
        stalled, snapshot = book.sh("queue_stalled", "confirm")
        (told,) = json_values(stalled.out)
        chain = told["lock"]
        assert (chain["key"], chain["waiting_sessions"], chain["worker_sessions"]) == ("42", 5, 6)
        (facts,) = chain["holders"]
        assert facts["pid"] == holder and facts["state"] == "idle"
        assert facts["application_name"].startswith("webhook-worker-")
        assert re.search(
            rf"pid {holder} webhook-worker-\d from 127\.0\.0\.1:\d+, idle for", snapshot.out
        )
        assert "lock 42: 5 session(s) waiting" in snapshot.out

        others = worker_sessions(server) - {holder}
        dry, act = book.sh("queue_stalled", "stop", incident=incident["id"])
        assert dry.code == 0 and act.code == 0, (dry, act)
        wait_until(lambda: not session_alive(server.dsn(), holder), message="the holder ended")
        wait_until(
            lambda: not watched.findings("queue_stalled"),
            timeout=60,
            interval=LOOK,
            message="drained",
        )
        assert others <= worker_sessions(server), "the other workers go on"
    finally:
        producer.stop()
        blackhole.close()
        receiver.close()


JOB = """
import time

import psycopg


def wait_for_partner():
    time.sleep(300)  # a call with no timeout that never returns


with psycopg.connect("{dsn}", autocommit=True, application_name="nightly-report") as conn:
    conn.execute("SELECT 1")
    wait_for_partner()
"""


def run_pid(watched: Watched, kind: str, job: str) -> list[dict[str, Any]]:
    found = [f for f in watched.findings(kind) if f["subject"]["job"] == job]
    return list(found[0]["evidence"]["runs"]) if found else []


def test_a_run_past_its_limit_is_found_on_its_host_and_stopped(
    server: LocalCluster, watched: Watched, runs: Runs, tmp_path: Path
) -> None:
    book = watched.book
    script = tmp_path / "nightly_report.py"
    script.write_text(JOB.format(dsn=server.dsn(user="app")))
    runs.start("long", sys.executable, str(script))
    (run,) = wait_until(
        lambda: run_pid(watched, "job_too_long", "long"), interval=LOOK, message="too long"
    )
    pid = run["pid"]
    # lockwatch may find the run past its limit before the script reaches its
    # hang (its imports took longer than the limit on a crowded machine): the
    # dump below is read once the job's session has run its statement, the
    # line before the call that never returns.
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        wait_until(
            lambda: admin.execute(
                "SELECT 1 FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
                " AND application_name = 'nightly-report' AND state = 'idle'"
                " AND query = 'SELECT 1'"
            ).fetchone(),
            message="the job at its hang",
        )

    (confirm,) = book.sh("job_too_long", "confirm")
    (told,) = json_values(confirm.out)
    assert told["pid"] == pid and told["host"] == os.uname().nodename
    ps, dump, ss = book.sh("job_too_long", "process", run_pid=pid)
    assert str(script) in ps.out, ps
    assert dump.code == 0 and "wait_for_partner" in dump.out, dump
    match = re.search(r"127\.0\.0\.1:(\d+)\s+127\.0\.0\.1:" + str(server.port), ss.out)
    assert match is not None, ss
    (session,) = book.sql("job_too_long", "session", port=int(match.group(1)))
    assert session[1] == "idle" and session[3] == "SELECT 1"

    (kill,) = book.sh("job_too_long", "stop", run_pid=pid)
    assert kill.code == 0, kill
    wait_until(
        lambda: not run_pid(watched, "job_too_long", "long"), interval=LOOK, message="resolved"
    )
    wait_until(
        lambda: watched.findings("job_failed"),
        interval=LOOK,
        message="the stopped run reported failed",
    )


def test_two_runs_at_once_one_stopped_and_a_duplicate_start_confirmed(
    watched: Watched, runs: Runs
) -> None:
    book = watched.book
    wrappers = {w.pid: w for w in (runs.start("overlap", "sleep", "300") for _ in range(2))}
    # Each run is a Python process (lockwatch exec) that starts, then pings:
    # on a busy machine that alone can take seconds.
    both = wait_until(
        lambda: len(found := run_pid(watched, "job_overlap", "overlap")) == 2 and found,
        timeout=60,
        interval=LOOK,
        message="overlap",
    )
    # A run's pid is its command's; its wrapper is that process's parent.
    wrapper_of = {r["pid"]: wrappers[psutil.Process(r["pid"]).ppid()] for r in both}
    (confirm,) = book.sh("job_overlap", "confirm")
    told = json_values(confirm.out)
    assert sorted(r["pid"] for r in told) == sorted(r["pid"] for r in both)
    # The two start within the same instant, so which is "later" is whatever the
    # runs reported: the kept one is the other, whichever that is.
    later = max(told, key=lambda r: r["started_at"])
    (kept,) = (w for pid, w in wrapper_of.items() if pid != later["pid"])
    (kill,) = book.sh("job_overlap", "stop", run_pid=later["pid"])
    assert kill.code == 0, kill
    wait_until(
        lambda: not run_pid(watched, "job_overlap", "overlap"),
        interval=LOOK,
        message="one run left",
    )
    assert wrapper_of[later["pid"]].wait(timeout=30) != 0, "the stopped run reports a failure"
    assert kept.poll() is None, "the run kept goes on"

    # Two schedulers run the same night's job.
    for twice in [runs.start("dup", "true", run_key="2026-12-01") for _ in range(2)]:
        twice.communicate(timeout=60)
    wait_until(
        lambda: watched.findings("job_duplicate_start"),
        interval=LOOK,
        message="the duplicate start",
    )
    evidence, doctor = book.sh("job_duplicate_start", "confirm")
    (told_dup,) = json_values(evidence.out)
    assert told_dup["run_key"] == "2026-12-01" and len(told_dup["starts"]) == 2
    assert all(isinstance(s["pid"], int) and s["source"] == "ping" for s in told_dup["starts"])
    assert doctor.code == 0 and "SAFE for session state" in doctor.out, doctor


def test_a_failed_run_is_confirmed_and_a_good_one_resolves_it(watched: Watched, runs: Runs) -> None:
    book = watched.book
    failed = runs.start("failing", "sh", "-c", "exit 3")
    failed.communicate(timeout=60)
    wait_until(
        lambda: [f for f in watched.findings("job_failed") if f["subject"]["job"] == "failing"],
        interval=LOOK,
        message="job_failed",
    )
    (confirm,) = book.sh("job_failed", "confirm")
    told = [t for t in json_values(confirm.out) if t["exit_code"] == 3]
    assert told and isinstance(told[0]["pid"], int)
    (again,) = book.sh("job_failed", "stop", job="failing", command="true")
    assert again.code == 0, again
    wait_until(
        lambda: not [f for f in watched.findings("job_failed") if f["subject"]["job"] == "failing"],
        interval=LOOK,
        message="resolved by a good run",
    )


def test_a_target_lockwatch_cannot_log_in_to_is_confirmed_and_its_password_restored(
    watched: Watched,
) -> None:
    book = watched.book
    wait_until(
        lambda: watched.findings("target_down", "down"), interval=LOOK, message="target_down"
    )
    down = book.with_env(DSN=down_dsn(watched))
    told, metric, psql = down.sh("target_down", "confirm")
    (error,) = [t["error"] for t in json_values(told.out) if t["target"] == "down"]
    assert "password authentication failed" in error and DOWN_PASSWORD not in error
    assert 'lockwatch_up{target="down"} 0' in metric.out, metric
    assert psql.code == 2 and "password authentication failed" in psql.err, psql
    assert book.sql("target_down", "password", role="lw_down", password=DOWN_PASSWORD) == []
    wait_until(
        lambda: not watched.findings("target_down", "down"),
        timeout=60,
        interval=LOOK,
        message="back",
    )


def down_dsn(watched: Watched) -> str:
    config = watched.book.config
    assert config is not None
    return (config.parent / "down.dsn").read_text().strip()


def test_a_scheduled_run_that_never_started_is_missed_and_run_by_hand(
    watched: Watched, runs: Runs
) -> None:
    book = watched.book
    # The job runs every minute and none of its runs came: at the next minute
    # past lockwatch's start, plus a second of grace, it is missed.
    wait_until(
        lambda: watched.findings("job_missed"), timeout=90, interval=LOOK, message="job_missed"
    )
    (confirm,) = book.sh("job_missed", "confirm")
    (told,) = json_values(confirm.out)
    assert told["slot"] in told["missed_slots"] and told["last_start"] is None
    (ran,) = book.sh("job_missed", "stop", job="missed", command="true")
    assert ran.code == 0, ran
    wait_until(
        lambda: not watched.findings("job_missed"), interval=LOOK, message="resolved by the run"
    )


def test_a_role_without_pg_monitor_is_confirmed_granted_and_seen_after_a_restart(
    watched: Watched,
) -> None:
    book = watched.book
    (finding,) = wait_until(
        lambda: watched.findings("target_privileges_missing", "blind"),
        interval=LOOK,
        message="blind",
    )
    blind = book.with_env(DSN=book.dsns["monitor"])
    (doctor,) = blind.sh("target_privileges_missing", "confirm")
    assert doctor.code == 3 and "role has pg_monitor no" in doctor.out, doctor
    assert blind.sql("target_privileges_missing", "role") == [(False,)]
    fix = book.text("target_privileges_missing", "fix", role="lw_blind")
    assert fix.strip() == finding["evidence"]["grant"] + ";"
    assert book.sql("target_privileges_missing", "fix", role="lw_blind") == []
    assert blind.sql("target_privileges_missing", "role") == [(True,)]
    watched.daemon.stop()
    watched.daemon.start()
    wait_until(
        lambda: not watched.findings("target_privileges_missing", "blind"),
        interval=LOOK,
        message="resolved once lockwatch opened its session again",
    )

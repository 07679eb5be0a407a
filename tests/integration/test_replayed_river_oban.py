"""River v0.43.0 and Oban v2.23.1 stuck jobs and consumers, replayed: neither
runs here (Go, Elixir), so each test creates the tables as the library's
migrations at that version do, enqueues as the application does (River
through the real ``riverqueue`` Python client, its insert-only client; Oban's
insert is a plain row), and replays the statements the library itself issues
to take, finish and lead (River's riverdriver/riverpgxv5/internal/dbsqlc/
queries, Oban's Basic engine and database peer), with their clock injected
where the library's own statements take one. The preset is read as
lockwatch's pg_monitor role reads it; ground truth is the rows the replay
wrote (which client or producer took which job)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from lockwatch.detect.long_jobs import detect_long_jobs
from lockwatch.detect.no_consumer import consumer_counts, detect_no_consumer, unserved_since
from lockwatch.detect.queues import QueueInput
from lockwatch.detect.stuck_jobs import detect_stuck_running
from lockwatch.model.evidence import LongJobsEvidence, NoConsumerEvidence, StuckJobsEvidence
from lockwatch.model.findings import FindingKind
from lockwatch.model.queues import QueueSample
from lockwatch.sample.presets.registry import preset_source
from lockwatch.sample.queues import reading_from_row
from lockwatch.settings.queues import QueueThresholds, SqlQueueSource
from tests.fixtures.evidence import evidence_as
from tests.fixtures.postgres import PgDatabase
from tests.integration.test_schema_presets import schema

RIVER_VERSION = "v0.43.0"
OBAN_VERSION = "v2.23.1"
FAR_ZONE = "-c TimeZone=Asia/Kathmandu"  # UTC+05:45: the ids and Oban's times are UTC

# riverqueue/river v0.43.0 riverdriver/riverpgxv5/migration/main/002 to 006
# (.up.sql): river_job with the columns and states those add, river_leader as
# 004 leaves it.
RIVER_SCHEMA = """
CREATE TYPE river_job_state AS ENUM ('available', 'cancelled', 'completed', 'discarded',
    'pending', 'retryable', 'running', 'scheduled');
CREATE TABLE river_job (
    id bigserial PRIMARY KEY,
    state river_job_state NOT NULL DEFAULT 'available',
    attempt smallint NOT NULL DEFAULT 0,
    max_attempts smallint NOT NULL,
    attempted_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    finalized_at timestamptz,
    scheduled_at timestamptz NOT NULL DEFAULT now(),
    priority smallint NOT NULL DEFAULT 1,
    args jsonb NOT NULL,
    attempted_by text[],
    errors jsonb[],
    kind text NOT NULL,
    metadata jsonb NOT NULL DEFAULT '{}',
    queue text NOT NULL DEFAULT 'default',
    tags varchar(255)[] NOT NULL DEFAULT '{}',
    unique_key bytea,
    unique_states bit(8)
);
CREATE UNLOGGED TABLE river_leader (
    elected_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    leader_id text NOT NULL,
    name text PRIMARY KEY DEFAULT 'default' CHECK (name = 'default')
);
"""
# The statements a River client issues (river_job.sql, river_leader.sql):
# JobGetAvailable takes due jobs for a client (attempted_by of 100 at most),
# JobSetStateIfRunning's completion, LeaderDeleteExpired then
# LeaderAttemptElect with the elector's TTL (5 s + 10 s of padding), each with
# River's own optional injected now.
RIVER_TAKE = """
WITH locked_jobs AS (
    SELECT * FROM river_job
    WHERE state = 'available' AND queue = %(queue)s::text
      AND scheduled_at <= coalesce(%(now)s::timestamptz, now())
    ORDER BY priority ASC, scheduled_at ASC, id ASC
    LIMIT %(max)s::integer
    FOR UPDATE SKIP LOCKED
)
UPDATE river_job SET state = 'running', attempt = river_job.attempt + 1,
    attempted_at = coalesce(%(now)s::timestamptz, now()),
    attempted_by = array_append(
        CASE WHEN array_length(river_job.attempted_by, 1) >= 100
        THEN river_job.attempted_by[array_length(river_job.attempted_by, 1) + 2 - 100:]
        ELSE river_job.attempted_by END,
        %(client)s::text)
FROM locked_jobs WHERE river_job.id = locked_jobs.id
RETURNING river_job.id
"""
RIVER_COMPLETE = """
UPDATE river_job SET state = 'completed', finalized_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(id)s AND state = 'running'
"""
RIVER_DELETE_EXPIRED = (
    "DELETE FROM river_leader WHERE expires_at < coalesce(%(now)s::timestamptz, now())"
)
RIVER_ELECT = """
INSERT INTO river_leader (leader_id, elected_at, expires_at)
VALUES (%(client)s, coalesce(%(now)s::timestamptz, now()),
        coalesce(%(now)s::timestamptz, now()) + make_interval(secs => 15))
ON CONFLICT (name) DO NOTHING
"""

# oban-bg/oban v2.23.1 lib/oban/migrations/postgres/v01.ex to v14.ex: oban_jobs
# as they leave it (the columns the Basic engine reads and writes), oban_peers (v11).
OBAN_SCHEMA = """
CREATE TYPE oban_job_state AS ENUM ('available', 'scheduled', 'executing', 'retryable',
    'completed', 'discarded', 'cancelled', 'suspended');
CREATE TABLE oban_jobs (
    id bigserial PRIMARY KEY,
    state oban_job_state NOT NULL DEFAULT 'available',
    queue text NOT NULL DEFAULT 'default',
    worker text NOT NULL,
    args jsonb NOT NULL DEFAULT '{}',
    errors jsonb[] NOT NULL DEFAULT ARRAY[]::jsonb[],
    attempt integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL DEFAULT 20,
    inserted_at timestamp NOT NULL DEFAULT timezone('UTC', now()),
    scheduled_at timestamp NOT NULL DEFAULT timezone('UTC', now()),
    attempted_at timestamp,
    completed_at timestamp,
    attempted_by text[],
    discarded_at timestamp,
    priority integer NOT NULL DEFAULT 0,
    tags text[] DEFAULT ARRAY[]::text[],
    meta jsonb DEFAULT '{}',
    cancelled_at timestamp
);
CREATE TABLE oban_peers (
    name text PRIMARY KEY,
    node text NOT NULL,
    started_at timestamp NOT NULL,
    expires_at timestamp NOT NULL
);
"""
# The Basic engine's fetch_jobs (lib/oban/engines/basic.ex: a CTE of due ids
# FOR UPDATE SKIP LOCKED, then attempt + 1 and [node, producer uuid]) and its
# complete_job; the database peer's upsert (lib/oban/peers/database.ex:
# expires_at = started_at + its 30 s interval).
OBAN_FETCH = """
WITH subset AS (
    SELECT id FROM oban_jobs WHERE state = 'available' AND queue = %(queue)s
    ORDER BY priority, scheduled_at, id LIMIT %(demand)s FOR UPDATE SKIP LOCKED
)
UPDATE oban_jobs AS j SET state = 'executing', attempted_at = %(now)s,
    attempted_by = ARRAY[%(node)s, %(producer)s], attempt = j.attempt + 1
FROM subset WHERE j.id = subset.id AND j.attempt < j.max_attempts
RETURNING j.id
"""
OBAN_COMPLETE = "UPDATE oban_jobs SET state = 'completed', completed_at = %(now)s WHERE id = %(id)s"
OBAN_PEER = """
INSERT INTO oban_peers (name, node, started_at, expires_at)
VALUES ('Oban', %(node)s, %(now)s, %(now)s + interval '30 seconds')
ON CONFLICT (name) DO UPDATE SET expires_at = EXCLUDED.expires_at
"""


def utc(moment: datetime) -> datetime:
    """Oban's utc_datetime_usec as the Basic engine writes it: UTC, no zone."""
    return moment.astimezone(UTC).replace(tzinfo=None)


def river_client_id(host: str, started: datetime) -> str:
    """A default River client id (client.go, defaultClientIDWithHost)."""
    return f"{host}_{started.astimezone(UTC):%Y_%m_%dT%H_%M_%S_%f}"


def read(pg: PgDatabase, preset: str, at: datetime | None = None) -> QueueSample:
    """One reading of queue ``mail`` through the preset, as the monitoring role."""
    source = preset_source(preset, queue="mail", redis_url=None, timeout=2.0)
    assert isinstance(source, SqlQueueSource)
    with psycopg.connect(pg.monitor_dsn, row_factory=dict_row, options=FAR_ZONE) as conn:
        (row,) = conn.execute(source.query, dict(source.params)).fetchall()
    return reading_from_row("mail", row, at or datetime.now(UTC))


@dataclass
class EmailArgs:
    """An application's River job args (riverqueue's JobArgs protocol)."""

    to: str
    kind: str = "email"

    def to_json(self) -> str:
        return f'{{"to": "{self.to}"}}'


def enqueue_river(pg: PgDatabase, count: int) -> None:
    """The application's enqueue, through River's own Python client (and
    SQLAlchemy under it: imported here, not by every xdist worker that
    collects this module)."""
    import sqlalchemy
    from riverqueue import Client, InsertOpts
    from riverqueue.driver import riversqlalchemy

    engine = sqlalchemy.create_engine(
        "postgresql+psycopg://", creator=lambda: psycopg.connect(pg.admin_dsn)
    )
    try:
        client = Client(riversqlalchemy.Driver(engine))
        for n in range(count):
            client.insert(EmailArgs(f"user{n}@example.com"), insert_opts=InsertOpts(queue="mail"))
    finally:
        engine.dispose()


def river_take(admin: psycopg.Connection[Any], client: str, count: int) -> list[int]:
    rows = admin.execute(
        RIVER_TAKE, {"queue": "mail", "now": None, "max": count, "client": client}
    ).fetchall()
    return sorted(row[0] for row in rows)


def stuck_ids(sample: QueueSample) -> list[str]:
    assert sample.stuck is not None
    return sorted(sample.stuck.job_ids, key=int)


def assert_nobody_runs_anything(
    pg: PgDatabase, admin: psycopg.Connection[Any], preset: str, running_sql: str
) -> None:
    """Every job the library's rows say runs is stuck, and no consumer is left."""
    gone = read(pg, preset)
    running = sorted(row[0] for row in admin.execute(running_sql).fetchall())
    assert stuck_ids(gone) == [str(i) for i in running]
    assert gone.consumers == 0


def test_river_jobs_of_a_restarted_client_are_stuck_and_every_client_gone_stops_the_queue(
    pg: PgDatabase,
) -> None:
    admin = schema(pg, RIVER_SCHEMA, "river_job", "river_leader")
    enqueue_river(pg, 5)
    started = datetime.now(UTC) - timedelta(hours=1)
    pod_a, pod_b = river_client_id("worker-a", started), river_client_id("worker-b", started)
    admin.execute(RIVER_DELETE_EXPIRED, {"now": None})
    admin.execute(RIVER_ELECT, {"client": pod_b, "now": None})
    a_jobs, b_jobs = river_take(admin, pod_a, 2), river_take(admin, pod_b, 1)
    healthy = read(pg, "river")
    assert (healthy.depth, healthy.in_flight, healthy.consumers) == (2, 3, 2)
    assert healthy.stuck is not None and healthy.stuck.count == 0
    # worker-a's pod restarts under its host name: a new client id, later start.
    pod_a_again = river_client_id("worker-a", datetime.now(UTC))
    river_take(admin, pod_a_again, 1)
    restarted = read(pg, "river")
    assert stuck_ids(restarted) == [str(i) for i in a_jobs]
    assert restarted.consumers == 2, "worker-b and the new worker-a; the old one is gone"
    (finding,) = detect_stuck_running(
        "main", [QueueInput("mail", QueueThresholds(), (restarted,))], restarted.at
    )
    evidence = evidence_as(finding, StuckJobsEvidence)
    assert (evidence.stuck_count, list(evidence.job_ids)) == (2, [str(i) for i in a_jobs])
    # worker-b finishing its job is no sign that worker-a's old jobs run.
    admin.execute(RIVER_COMPLETE, {"id": b_jobs[0], "now": None})
    assert stuck_ids(read(pg, "river")) == [str(i) for i in a_jobs]

    # Every client dies; the leader's last renewal was 30 s ago, nobody bids.
    admin.execute("TRUNCATE river_leader")  # the test's reset: River's rows, replayed below
    admin.execute(RIVER_ELECT, {"client": pod_b, "now": datetime.now(UTC) - timedelta(seconds=30)})
    assert_nobody_runs_anything(
        pg, admin, "river", "SELECT id FROM river_job WHERE state = 'running'"
    )


def test_a_river_client_with_an_id_of_its_own_or_alone_on_its_host_is_never_stuck_while_it_leads(
    pg: PgDatabase,
) -> None:
    admin = schema(pg, RIVER_SCHEMA, "river_job", "river_leader")
    enqueue_river(pg, 3)
    old = river_client_id("worker-a", datetime.now(UTC) - timedelta(hours=2))
    admin.execute(RIVER_ELECT, {"client": old, "now": None})
    river_take(admin, old, 1)
    # A second client of the same host starts later (two clients in one
    # process): the first leads now, so it is alive.
    river_take(admin, river_client_id("worker-a", datetime.now(UTC)), 1)
    river_take(admin, "payments-worker", 1)  # an id of its own: no host, no start time
    sample = read(pg, "river")
    assert sample.stuck is not None and sample.stuck.count == 0
    assert sample.consumers == 3


def oban_app(pg: PgDatabase, *, leader: str, jobs: int) -> tuple[psycopg.Connection[Any], datetime]:
    """Oban's tables, a live peer leading on ``leader``, and ``jobs`` inserted
    for queue mail; an admin session and the time it all happened."""
    admin = schema(pg, OBAN_SCHEMA, "oban_jobs", "oban_peers")
    now = datetime.now(UTC)
    admin.execute(OBAN_PEER, {"node": leader, "now": utc(now)})
    for _ in range(jobs):
        admin.execute("INSERT INTO oban_jobs (worker, queue) VALUES ('MyApp.Mailer', 'mail')")
    return admin, now


def oban_fetch(
    admin: psycopg.Connection[Any], node: str, producer: str, demand: int, at: datetime
) -> list[int]:
    rows = admin.execute(
        OBAN_FETCH,
        {"queue": "mail", "demand": demand, "now": utc(at), "node": node, "producer": producer},
    ).fetchall()
    return sorted(row[0] for row in rows)


def test_oban_jobs_of_a_node_restarted_under_its_name_are_stuck_by_producer_not_node(
    pg: PgDatabase,
) -> None:
    admin, now = oban_app(pg, leader="web-2", jobs=6)
    a_jobs = oban_fetch(admin, "web-1", "uuid-a", 2, now - timedelta(minutes=5))
    c_jobs = oban_fetch(admin, "web-2", "uuid-c", 1, now - timedelta(minutes=4))
    healthy = read(pg, "oban")
    assert (healthy.depth, healthy.in_flight, healthy.consumers) == (3, 3, 2)
    assert healthy.stuck is not None and healthy.stuck.count == 0
    # web-1 comes back under the same node name (oban-bg/oban#862): a new producer.
    oban_fetch(admin, "web-1", "uuid-b", 1, now - timedelta(minutes=1))
    restarted = read(pg, "oban")
    assert stuck_ids(restarted) == [str(i) for i in a_jobs]
    assert restarted.stuck is not None and restarted.stuck.since == now - timedelta(minutes=5)
    assert restarted.consumers == 2
    # web-2 completes its job; still nothing of uuid-a's is taken as alive.
    admin.execute(OBAN_COMPLETE, {"id": c_jobs[0], "now": utc(now)})
    assert stuck_ids(read(pg, "oban")) == [str(i) for i in a_jobs]
    # Every instance stops; the peer's row was last renewed 2 minutes ago.
    admin.execute("TRUNCATE oban_peers")  # the test's reset: Oban's row, replayed below
    admin.execute(OBAN_PEER, {"node": "web-2", "now": utc(now - timedelta(minutes=2))})
    assert_nobody_runs_anything(
        pg, admin, "oban", "SELECT id FROM oban_jobs WHERE state = 'executing'"
    )


def test_two_oban_producers_of_one_node_that_both_take_work_are_not_stuck(
    pg: PgDatabase,
) -> None:
    admin, now = oban_app(pg, leader="web-1", jobs=4)
    oban_fetch(admin, "web-1", "uuid-a", 1, now - timedelta(minutes=3))
    oban_fetch(admin, "web-1", "uuid-b", 1, now - timedelta(minutes=2))
    oban_fetch(admin, "web-1", "uuid-a", 1, now - timedelta(minutes=1))  # a takes on: alive
    sample = read(pg, "oban")
    assert sample.stuck is not None and sample.stuck.count == 0
    assert sample.consumers == 2


def test_an_enqueue_only_river_app_with_every_client_gone_is_no_consumer_within_budget_and_a_poll(
    pg: PgDatabase,
) -> None:
    """The web app goes on enqueueing through River's Python client after the
    last worker died: the leader's row expires and nobody bids, so the queue
    has no consumer; polled every 15 s on an injected clock from the leader's
    last renewal, queue_no_consumer is due within its budget plus one poll."""
    admin = schema(pg, RIVER_SCHEMA, "river_job", "river_leader")
    interval = 15.0
    thresholds = QueueThresholds()
    last_renewal = datetime.now(UTC) - timedelta(seconds=30)
    worker = river_client_id("worker-a", last_renewal - timedelta(hours=1))
    admin.execute(RIVER_ELECT, {"client": worker, "now": last_renewal})
    enqueue_river(pg, 3)
    assert read(pg, "river").consumers == 0
    # The replay's polls: the readings are the same rows, their times injected.
    clock, since, found = last_renewal, None, None
    while found is None and clock < last_renewal + timedelta(hours=1):
        clock += timedelta(seconds=interval)
        sample = read(pg, "river", at=clock)
        since = unserved_since(since, sample, consumer_counts(sample, ()))
        found = detect_no_consumer("main", QueueInput("mail", thresholds, (sample,)), since, clock)
    assert found is not None and found.kind is FindingKind.QUEUE_NO_CONSUMER
    after = (clock - last_renewal).total_seconds()
    print(
        f"river, every client gone: queue_no_consumer {after:.0f} s after the leader's last renewal"
    )
    # The leader's row lasts 15 s; lockwatch waits 10 more before it says nobody bids.
    assert after <= 15 + 10 + thresholds.no_consumer_after + interval
    evidence = evidence_as(found, NoConsumerEvidence)
    assert evidence.depth == 3 and [c.count for c in evidence.consumers] == [0]


def test_a_hung_river_handler_is_found_at_its_kinds_learned_budget(pg: PgDatabase) -> None:
    """Twelve emails of 2 to 3 s, then one that runs on while its client
    leads: queue_job_too_long at 3 x the kind's p99 (the 60 s floor), judged a
    minute on by the injected clock, naming the job, its client and River's
    own rescue an hour on."""
    admin = schema(pg, RIVER_SCHEMA, "river_job", "river_leader")
    enqueue_river(pg, 14)
    client = river_client_id("worker-a", datetime.now(UTC) - timedelta(hours=1))
    admin.execute(RIVER_ELECT, {"client": client, "now": None})
    # River's statements with its injected now, from the enqueue on.
    start = datetime.now(UTC)
    for n in range(12):
        at = start + timedelta(minutes=n)
        (job,) = admin.execute(
            RIVER_TAKE, {"queue": "mail", "now": at, "max": 1, "client": client}
        ).fetchall()
        admin.execute(RIVER_COMPLETE, {"id": job[0], "now": at + timedelta(seconds=2 + n % 2)})
    hung_since = start + timedelta(minutes=15)
    (hung,) = admin.execute(
        RIVER_TAKE, {"queue": "mail", "now": hung_since, "max": 1, "client": client}
    ).fetchall()
    sample = read(pg, "river", at=hung_since + timedelta(seconds=61))
    assert sample.task_history is not None
    history = sample.task_history["email"]
    assert (history.runs, history.p50_seconds, history.p99_seconds) == (12, 2.0, 3.0)
    assert sample.stuck is not None and sample.stuck.count == 0  # its client leads: alive
    found = detect_long_jobs("main", "mail", QueueThresholds(), sample, sample.at)
    assert found is not None
    [long_job] = evidence_as(found, LongJobsEvidence).jobs
    assert (long_job.job_id, long_job.task, long_job.workers) == (str(hung[0]), "email", (client,))
    assert long_job.budget_seconds == 60.0
    assert long_job.budget_from == "usually 2s, p99 3s over 12 runs"
    assert long_job.library_deadline == hung_since + timedelta(hours=1)


def test_oban_tells_each_executing_jobs_worker_and_its_workers_history(pg: PgDatabase) -> None:
    admin, now = oban_app(pg, leader="web-1", jobs=11)
    for n in range(10):
        at = now - timedelta(minutes=20 - n)
        (job,) = oban_fetch(admin, "web-1", "uuid-a", 1, at)
        admin.execute(OBAN_COMPLETE, {"id": job, "now": utc(at + timedelta(seconds=4))})
    (running,) = oban_fetch(admin, "web-1", "uuid-a", 1, now - timedelta(minutes=5))
    sample = read(pg, "oban")
    assert sample.task_history is not None
    history = sample.task_history["MyApp.Mailer"]
    assert (history.runs, history.p50_seconds, history.p99_seconds) == (10, 4.0, 4.0)
    assert sample.running is not None
    [run] = sample.running.runs
    assert (run.job_id, run.task, run.workers) == (str(running), "MyApp.Mailer", ("web-1/uuid-a",))
    assert run.library_deadline == now - timedelta(minutes=5) + timedelta(minutes=60)
    assert run.library_action is not None and "Lifeline" in run.library_action


def test_the_versions_replayed_are_named() -> None:
    """The versions the SQL above was read from, as docs/configuration.md names them."""
    text = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert f"River {RIVER_VERSION}" in text and f"Oban {OBAN_VERSION}" in text

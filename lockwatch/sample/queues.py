"""Queue depth from an SQL query, run in lockwatch's read-only session of the target.

The query is the operator's (or a preset's); this module runs it and checks
its shape, so a query that returns the wrong columns fails with words that
say what to change instead of a metric that silently reads 0.
"""

from __future__ import annotations

import decimal
import logging
import math
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from lockwatch.model.queues import (
    QueueJobRun,
    QueueSample,
    RunningJobs,
    StuckJobs,
    TaskHistory,
)
from lockwatch.sample.base import BlockedError, Database, SampleContext, SampleError, TimedOutError
from lockwatch.settings.queues import LibrarySchema, Queue, SqlQueueSource

if TYPE_CHECKING:
    from lockwatch.model.evidence.targets import SourceBlocker

log = logging.getLogger(__name__)

REQUIRED = "depth"
# Jobs marked running whose worker session is gone: how many, the ids of the
# oldest (an array of text), and when the oldest was taken.
STUCK = ("stuck_count", "stuck_job_ids", "stuck_since")
# The running jobs one by one (a JSON array of {id, attempt, started_at,
# workers, rescued}) and the library's workers alive now (an array of text).
# Optional in each entry: task, sessions (pids), deadline and action (what
# the library itself will do to it, and when), handling (the [worker, batch]
# pairs its workers were handling at a beat after it started) and
# workers_told (false: its workers are the library's sessions of its time),
# liveness_told (false: the library ties no running job to a live worker).
# Optional beside them, busy_workers: the [worker, batch] pairs live workers
# are handling now (a handler kept past its timeout included).
RUNNING = ("running_jobs", "live_workers", "busy_workers")
# Per task, its recent successful runs: a JSON object of {runs, p50, p99}.
TASK_HISTORY = "task_history"
# The consumers the library knows alive now (for queue_no_consumer).
CONSUMERS = "consumers"
OPTIONAL = (
    *("oldest_age_seconds", "completed_total", "in_flight", CONSUMERS, TASK_HISTORY),
    *STUCK,
    *RUNNING,
)
LABEL = "queue"
# Who holds a relation the query names (schema.name, or a name on the
# search_path) in the one mode that blocks a read
# (ACCESS EXCLUSIVE: DDL, LOCK TABLE, VACUUM FULL), asked when the query
# timed out: what it waited on, for its target_down to join their incident.
BLOCKERS_SQL = """
SELECT l.pid, l.mode, n.nspname || '.' || c.relname AS relation, a.application_name
FROM pg_catalog.pg_locks l
JOIN pg_catalog.pg_class c ON c.oid = l.relation
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'relation' AND l.granted AND l.mode = 'AccessExclusiveLock'
  AND l.database = (SELECT oid FROM pg_catalog.pg_database
                    WHERE datname = pg_catalog.current_database())
  AND l.pid <> pg_catalog.pg_backend_pid()
  AND (pg_catalog.strpos(%(query)s, n.nspname || '.' || c.relname) > 0
       OR (pg_catalog.strpos(%(query)s, c.relname) > 0
           AND n.nspname = ANY (pg_catalog.current_schemas(false))))
ORDER BY l.pid, relation
LIMIT 5
"""


def _number(queue: str, column: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float | decimal.Decimal):
        raise SampleError(f"queue {queue}: column {column} is {type(value).__name__}, not a number")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise SampleError(f"queue {queue}: column {column} is {value}, not a count >= 0")
    return number


def _count(queue: str, column: str, value: object) -> int | None:
    number = _number(queue, column, value)
    return None if number is None else int(number)


def _stuck(queue: str, row: Mapping[str, Any]) -> StuckJobs | None:
    count = _count(queue, STUCK[0], row.get(STUCK[0]))
    if count is None:
        return None
    ids = row.get(STUCK[1]) or []
    since = row.get(STUCK[2])
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise SampleError(f"queue {queue}: column {STUCK[1]} is not an array of text")
    if since is not None and not isinstance(since, datetime):
        raise SampleError(f"queue {queue}: column {STUCK[2]} is not a timestamptz")
    return StuckJobs(count, tuple(ids), since)


def _zoned(value: object) -> datetime | None:
    """An ISO time with its zone, from JSON; None when it is not one."""
    try:
        at = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None
    return at if at is not None and at.tzinfo is not None else None


def _pairs(value: object) -> tuple[tuple[str, str], ...] | None:
    """[worker, batch] pairs from JSON; None when it is not a list of them."""
    if not isinstance(value, list):
        return None
    pairs = []
    for pair in value:
        if not (
            isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)
        ):
            return None
        pairs.append((pair[0], pair[1]))
    return tuple(pairs)


def _run(queue: str, item: object) -> QueueJobRun:
    problem = f"queue {queue}: column {RUNNING[0]} has an entry that is not "
    if not isinstance(item, dict):
        raise SampleError(problem + "an object")
    at = _zoned(item.get("started_at"))
    workers = item.get("workers") or []
    attempt = item.get("attempt")
    sessions = item.get("sessions") or []
    task, action = item.get("task"), item.get("action")
    handling = _pairs(item.get("handling") or [])
    told, liveness = item.get("workers_told", True), item.get("liveness_told", True)
    if (
        at is None
        or handling is None
        or not isinstance(told, bool)
        or not isinstance(liveness, bool)
        or not isinstance(attempt, int)
        or not isinstance(workers, list)
        or not all(isinstance(w, str) for w in workers)
        or not isinstance(sessions, list)
        or not all(isinstance(pid, int) for pid in sessions)
        or not isinstance(task, str | None)
        or not isinstance(action, str | None)
    ):
        raise SampleError(
            problem + "{id, attempt, started_at (with its zone), workers, rescued"
            " [, task, sessions (pids), deadline, action, handling ([worker, batch] pairs),"
            " workers_told, liveness_told]}"
        )
    return QueueJobRun(
        str(item.get("id")),
        attempt,
        at,
        tuple(workers),
        item.get("rescued") is True,
        task=task,
        sessions=tuple(sessions),
        library_deadline=_zoned(item.get("deadline")),
        library_action=action,
        handling=handling,
        workers_told=told,
        liveness_told=liveness,
    )


def _task_history(queue: str, row: Mapping[str, Any]) -> dict[str, TaskHistory] | None:
    tasks = row.get(TASK_HISTORY)
    if tasks is None:
        return None
    if not isinstance(tasks, dict):
        raise SampleError(f"queue {queue}: column {TASK_HISTORY} is not a JSON object")
    history = {}
    for task, facts in tasks.items():
        if not isinstance(facts, dict):
            raise SampleError(f"queue {queue}: {TASK_HISTORY} of {task} is not {{runs, p50, p99}}")
        runs = _count(queue, TASK_HISTORY, facts.get("runs"))
        p50 = _number(queue, TASK_HISTORY, facts.get("p50"))
        p99 = _number(queue, TASK_HISTORY, facts.get("p99"))
        if runs is None or p50 is None or p99 is None:
            raise SampleError(f"queue {queue}: {TASK_HISTORY} of {task} is not {{runs, p50, p99}}")
        history[str(task)] = TaskHistory(runs, p50, p99)
    return history


def _running(queue: str, row: Mapping[str, Any]) -> RunningJobs | None:
    runs = row.get(RUNNING[0])
    if runs is None:
        return None
    live = row.get(RUNNING[1]) or []
    if not isinstance(runs, list):
        raise SampleError(f"queue {queue}: column {RUNNING[0]} is not a JSON array")
    if not isinstance(live, list) or not all(isinstance(w, str) for w in live):
        raise SampleError(f"queue {queue}: column {RUNNING[1]} is not an array of text")
    busy = row.get(RUNNING[2])
    pairs = None if busy is None else _pairs(busy)
    if busy is not None and pairs is None:
        raise SampleError(
            f"queue {queue}: column {RUNNING[2]} is not a JSON array of [worker, batch]"
        )
    return RunningJobs(
        tuple(_run(queue, item) for item in runs),
        frozenset(live),
        None if pairs is None else frozenset(pairs),
    )


def reading_from_row(queue: str, row: Mapping[str, Any], at: datetime) -> QueueSample:
    depth = _count(queue, REQUIRED, row[REQUIRED])
    if depth is None:
        raise SampleError(f"queue {queue}: depth is NULL (write coalesce(..., 0))")
    return QueueSample(
        at=at,
        depth=depth,
        oldest_age_seconds=_number(queue, "oldest_age_seconds", row.get("oldest_age_seconds")),
        completed_total=_count(queue, "completed_total", row.get("completed_total")),
        in_flight=_count(queue, "in_flight", row.get("in_flight")),
        consumers=_count(queue, CONSUMERS, row.get(CONSUMERS)),
        stuck=_stuck(queue, row),
        running=_running(queue, row),
        task_history=_task_history(queue, row),
    )


def readings_from_rows(
    queue: Queue, rows: Iterable[Mapping[str, Any]], at: datetime
) -> dict[str, QueueSample]:
    """Check the shape of what a queue's query returned and read it.

    One row for a plain queue; with sub-queues, a row per sub-queue named in
    its ``queue`` column, where a sub-queue without a row is empty (as GROUP BY
    leaves it) and one that is not configured is left out.

    >>> from lockwatch.settings.queues import Queue, SqlQueueSource
    >>> q = Queue("jobs", SqlQueueSource("...", sub_queues=("mail", "hooks")))
    >>> now = datetime(2025, 1, 1)
    >>> sorted((n, s.depth) for n, s in readings_from_rows(q, [{"queue": "mail", "depth": 3}], now).items())
    [('jobs/hooks', 0), ('jobs/mail', 3)]
    """
    assert isinstance(queue.source, SqlQueueSource)
    subs = queue.source.sub_queues
    rows = list(rows)
    allowed = {REQUIRED, *OPTIONAL, *((LABEL,) if subs else ())}
    for row in rows[:1]:
        if REQUIRED not in row:
            raise SampleError(
                f"queue {queue.name}: the query returns no depth column "
                f"(got {', '.join(row) or 'no columns'}; name the count AS depth)"
            )
        if LABEL in row and not subs:
            raise SampleError(
                f"queue {queue.name}: the query returns a {LABEL} column; "
                "list the sub-queues to watch in sub_queues"
            )
        unknown = [column for column in row if column not in allowed]
        if unknown:
            raise SampleError(
                f"queue {queue.name}: unexpected column(s) {', '.join(unknown)} "
                f"(expected {', '.join(sorted(allowed))})"
            )
        if subs and LABEL not in row:
            raise SampleError(
                f"queue {queue.name}: with sub_queues the query must return a {LABEL} column "
                "naming each row's sub-queue"
            )
    if not subs:
        if len(rows) != 1:
            raise SampleError(
                f"queue {queue.name}: the query returned {len(rows)} rows, expected 1 "
                "(a GROUP BY needs sub_queues)"
            )
        return {queue.name: reading_from_row(queue.name, rows[0], at)}
    readings: dict[str, QueueSample] = {}
    for row in rows:
        label = row[LABEL]
        if label not in subs:
            continue
        name = f"{queue.name}/{label}"
        if name in readings:
            raise SampleError(f"queue {queue.name}: sub-queue {label} appears in two rows")
        readings[name] = reading_from_row(name, row, at)
    for sub in subs:
        readings.setdefault(f"{queue.name}/{sub}", QueueSample(at, 0))
    return readings


def schema_query(schema: LibrarySchema, version: int) -> tuple[str, str | None]:
    """The query for the library's schema ``version``, and what to say of a
    version newer than any lockwatch knows (read as the latest it knows).
    Raises SampleError for one older than any it reads.

    >>> from lockwatch.settings.queues import SchemaRelease
    >>> s = LibrarySchema("lib", "", (SchemaRelease(1, 2, "lib 1", "Q1"), SchemaRelease(3, 5, "lib 2", "Q2")))
    >>> schema_query(s, 4)
    ('Q2', None)
    >>> schema_query(s, 9)[1]
    'lib schema version 9 is newer than lockwatch knows (up to 5, lib 2): read as 5'
    """
    for each in schema.ranges:
        if each.first <= version <= each.last:
            return each.query, None
    latest, oldest = schema.ranges[-1], schema.ranges[0]
    if version > latest.last:
        return latest.query, (
            f"{schema.library} schema version {version} is newer than lockwatch knows "
            f"(up to {latest.last}, {latest.releases}): read as {latest.last}"
        )
    known = ", ".join(f"{r.first}-{r.last} ({r.releases})" for r in schema.ranges)
    raise SampleError(
        f"{schema.library} schema version {version} is older than lockwatch reads "
        f"(from {oldest.first}; known: {known}): upgrade {schema.library} or watch "
        "this queue with your own sql"
    )


def _blockers(db: Database, query: str) -> tuple[SourceBlocker, ...]:
    """The sessions holding a relation ``query`` names in ACCESS EXCLUSIVE
    mode; none when that cannot be read either."""
    # Here, not at the top: check-config reads the queue libraries' schemas
    # with this module without building every finding's evidence (issue 32).
    from lockwatch.model.evidence.targets import SourceBlocker

    try:
        rows = db.query(BLOCKERS_SQL, {"query": query})
    except SampleError:
        return ()
    return tuple(
        SourceBlocker(
            int(row["pid"]), str(row["mode"]), str(row["relation"]), row["application_name"]
        )
        for row in rows
    )


class SqlQueueSampler:
    """One queue entry's query, on the target's session; a preset's library
    read by its installed schema's version, asked at each poll (one row)."""

    def __init__(self, queue: Queue) -> None:
        assert isinstance(queue.source, SqlQueueSource)
        self.queue = queue
        self.spec = queue.source
        self._told: str | None = None  # the last unknown-version note logged

    def _query(self, db: Database) -> str:
        schema = self.spec.schema
        if schema is None:
            return self.spec.query
        rows = db.query(schema.version_query)
        version = rows[0].get("version") if rows else None
        if not isinstance(version, int):
            raise SampleError(f"{schema.library}: no schema version found (is it installed?)")
        query, note = schema_query(schema, version)
        if note is not None and note != self._told:
            log.warning("queue %s: %s", self.queue.name, note)
        self._told = note
        return query

    def sample(self, context: SampleContext) -> dict[str, QueueSample]:
        db = context.database()
        query = ""
        try:
            query = self._query(db)
            rows = db.query(query, self.spec.params or None)
        except SampleError as exc:
            note = f" ({self._told})" if self._told else ""
            message = f"queue {self.queue.name}: {exc}{note}"
            blocked_by = _blockers(db, query) if isinstance(exc, TimedOutError) else ()
            if blocked_by:
                raise BlockedError(message, blocked_by) from None
            raise type(exc)(message) from None
        return readings_from_rows(self.queue, rows, context.now)

    def close(self) -> None:
        """The session belongs to the target's lock sampler."""

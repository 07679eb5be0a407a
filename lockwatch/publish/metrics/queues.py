"""Prometheus metrics of queues, worker groups and a target's other sources.

Rendered from the board like every other metric. Queue, group and source
names come from the config; the locks worker sessions wait on are capped per
group, so the series stay bounded whatever the clients do.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from lockwatch.model.evidence import SESSION_STATES
from lockwatch.publish.metrics.families import Exposition, Family
from lockwatch.state.target_view import TargetView

WAITS_PER_GROUP = 5  # locks exported per worker group, most waiting sessions first


def source_metrics(views: Iterable[TargetView], scrape: Exposition) -> Iterator[Family]:
    up = scrape.gauge(
        "lockwatch_source_up",
        "1 if the last attempt to sample the target's source (a queue, a worker group, "
        "the workers' sessions) succeeded, 0 if it failed or waits for the database.",
        ["target", "source"],
    )
    errors = scrape.counter(
        "lockwatch_source_errors",
        "Attempts to sample the source that failed.",
        ["target", "source"],
    )
    for view in views:
        for health in view.sources:
            labels = (view.target.name, health.name)
            up.add(labels, 1.0 if health.up else 0.0)
            errors.add(labels, health.errors_total)
    yield from (up, errors)


def queue_metrics(views: Iterable[TargetView], scrape: Exposition) -> Iterator[Family]:
    labels = ["target", "queue"]
    depth = scrape.gauge(
        "lockwatch_queue_depth", "Items waiting in the queue at the last sample.", labels
    )
    oldest = scrape.gauge(
        "lockwatch_queue_oldest_age_seconds",
        "Age of the oldest waiting item; absent when the source does not tell.",
        labels,
    )
    in_flight = scrape.gauge(
        "lockwatch_queue_in_flight",
        "Items taken by a worker and not finished; absent when the source does not tell.",
        labels,
    )
    growth = scrape.gauge(
        "lockwatch_queue_growth_per_second",
        "Least-squares slope of the depth over the queue's window (negative: draining).",
        labels,
    )
    completed = scrape.counter(
        "lockwatch_queue_completed",
        "Finished items as the source counts them; absent when it does not. A drop "
        "(finished rows cleaned up) reads as a counter reset.",
        labels,
    )
    for view in views:
        for queue in view.queues:
            series = (view.target.name, queue.name)
            latest = queue.latest
            if latest is None:
                continue  # never sampled, or stale: a number would claim what is not known
            depth.add(series, latest.depth)
            if latest.oldest_age_seconds is not None:
                oldest.add(series, latest.oldest_age_seconds)
            if latest.in_flight is not None:
                in_flight.add(series, latest.in_flight)
            if latest.completed_total is not None:
                completed.add(series, latest.completed_total)
            if queue.growth_per_second is not None:
                growth.add(series, queue.growth_per_second)
    yield from (depth, oldest, in_flight, growth, completed)
    yield from queue_liveness_metrics(views, scrape)


def queue_liveness_metrics(views: Iterable[TargetView], scrape: Exposition) -> Iterator[Family]:
    """When each queue was last observed, its live consumers, its longest-running job
    and its learned normal throughput."""
    labels = ["target", "queue"]
    consumers = scrape.gauge(
        "lockwatch_queue_consumers",
        "Consumers the queue's library knows alive (workers, instances with a heartbeat); "
        "absent when it does not tell.",
        labels,
    )
    longest = scrape.gauge(
        "lockwatch_queue_job_longest_running_seconds",
        "How long the longest-running job of the queue's library has run (0: none runs); "
        "absent when the source does not tell.",
        labels,
    )
    observed = scrape.gauge(
        "lockwatch_queue_observed_timestamp_seconds",
        "When the queue's last reading was observed (Unix time). Its other series go "
        "away once that is 3 of its intervals old: a silent source shows no frozen backlog.",
        labels,
    )
    normal = scrape.gauge(
        "lockwatch_queue_normal_completed_per_minute",
        "The queue's learned completions per minute while work waits (queue_capacity_lost "
        "compares its window with it); absent while it is learned.",
        labels,
    )
    for view in views:
        for queue in view.queues:
            series = (view.target.name, queue.name)
            if queue.normal_completed_per_minute is not None:
                normal.add(series, queue.normal_completed_per_minute)
            if queue.observed_at is not None:
                observed.add(series, queue.observed_at.timestamp())
            if queue.latest is not None and queue.latest.consumers is not None:
                consumers.add(series, queue.latest.consumers)
            if queue.longest_job_seconds is not None:
                longest.add(series, queue.longest_job_seconds)
    yield from (consumers, longest, observed, normal)


def worker_metrics(views: Iterable[TargetView], scrape: Exposition) -> Iterator[Family]:
    labels = ["target", "group"]
    cpu = scrape.counter(
        "lockwatch_worker_cpu_seconds",
        "CPU seconds used by the worker group's processes (with their children), as "
        "a counter that survives restarts of the workers.",
        labels,
    )
    processes = scrape.gauge(
        "lockwatch_worker_processes", "Processes in the worker group at the last sample.", labels
    )
    cores = scrape.gauge(
        "lockwatch_worker_cpu_cores",
        "Average cores the worker group used over its window (the longest of its queues').",
        labels,
    )
    sessions = scrape.gauge(
        "lockwatch_worker_sessions",
        "The group's database sessions by state: active (running SQL), waiting_lock "
        "(waiting on a lock), idle, idle_in_transaction, other.",
        [*labels, "state"],
    )
    waiting = scrape.gauge(
        "lockwatch_worker_sessions_waiting_on_lock",
        f"The group's sessions waiting on each advisory lock (at most {WAITS_PER_GROUP} "
        "locks per group, most waiters first).",
        [*labels, "database", "lock"],
    )
    for view in views:
        for group in view.workers:
            series = (view.target.name, group.name)
            if group.latest is not None:
                cpu.add(series, group.latest.cpu_seconds)
                if group.latest.processes is not None:
                    processes.add(series, group.latest.processes)
            if group.cpu_cores is not None:
                cores.add(series, group.cpu_cores)
            if group.sessions is not None:
                for state in SESSION_STATES:
                    sessions.add((*series, state), group.sessions.get(state, 0))
            for wait in group.waiting_on[:WAITS_PER_GROUP]:
                waiting.add((*series, wait.database, wait.lock), wait.sessions)
    yield from (cpu, processes, cores, sessions, waiting)

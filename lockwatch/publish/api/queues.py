"""``/api/v1/queues``: every target's queues, worker groups and sources, as the
last poll left them. Pure: board views in, a JSON-ready document out."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lockwatch.model.queues import QueueView, WorkerView
from lockwatch.model.views import SourceHealth
from lockwatch.publish.api.encode import json_safe
from lockwatch.state.board import Board
from lockwatch.state.target_view import TargetView
from lockwatch.text import iso_utc


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _queue_entry(queue: QueueView) -> dict[str, Any]:
    latest = queue.latest
    return {
        "name": queue.name,
        "source": queue.source,
        "sampled_at": None if latest is None else iso_utc(latest.at),
        # When it was last read, even once that is too old to show (stale: true).
        "observed_at": iso_utc(queue.observed_at),
        "stale": latest is None and queue.observed_at is not None,
        "depth": None if latest is None else latest.depth,
        "oldest_age_seconds": None if latest is None else _round(latest.oldest_age_seconds),
        "in_flight": None if latest is None else latest.in_flight,
        "completed_total": None if latest is None else latest.completed_total,
        "growth_per_second": _round(queue.growth_per_second),
        "window_seconds": queue.window,
        "workers": list(queue.workers),
    }


def _worker_entry(group: WorkerView) -> dict[str, Any]:
    latest = group.latest
    return {
        "name": group.name,
        "queues": list(group.queues),
        "processes": None if latest is None else latest.processes,
        "cpu_seconds_total": None if latest is None else _round(latest.cpu_seconds),
        "cpu_cores": _round(group.cpu_cores),
        "window_seconds": group.window,
        "sessions": None if group.sessions is None else dict(group.sessions),
        "waiting_on": [
            {"database": w.database, "lock": w.lock, "key": w.key, "sessions": w.sessions}
            for w in group.waiting_on
        ],
    }


def _source_entry(health: SourceHealth) -> dict[str, Any]:
    return {
        "name": health.name,
        "up": health.up,
        "error": health.error,
        "failing_since": iso_utc(health.failing_since),
        "checked_at": iso_utc(health.checked_at),
        "errors_total": health.errors_total,
    }


def queues_document(views: Board | Iterable[TargetView]) -> dict[str, Any]:
    all_views = views.views() if isinstance(views, Board) else tuple(views)
    document: dict[str, Any] = json_safe(
        {
            "targets": [
                {
                    "target": view.target.name,
                    "queues": [_queue_entry(q) for q in view.queues],
                    "workers": [_worker_entry(w) for w in view.workers],
                    "sources": [_source_entry(s) for s in view.sources],
                }
                for view in all_views
            ]
        }
    )
    return document

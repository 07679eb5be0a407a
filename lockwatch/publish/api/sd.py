"""``/api/v1/sd``: the targets this instance watches, in Prometheus' http_sd
format, so Prometheus can scrape one probe per target (``/metrics?target=``)
or tell which shard watches what.

Each group holds this instance's own address (as the request reached it) and
labels the target: ``__param_target`` (its name) and ``__metrics_path__`` for a
per-target scrape, ``postgres_instance`` (the server, never its DSN) and the
labels it was discovered with. No ``target`` label: the scraped series carry
their own, which Prometheus would rename ``exported_target``.
"""

from __future__ import annotations

from collections.abc import Iterable

from lockwatch.publish.api.encode import _views
from lockwatch.state.board import Board
from lockwatch.state.target_view import TargetView


def sd_document(
    board_or_views: Board | Iterable[TargetView], address: str, metrics_path: str
) -> list[dict[str, object]]:
    groups: list[dict[str, object]] = []
    for view in _views(board_or_views):
        target = view.target
        labels = {
            **dict(target.labels),
            "postgres_instance": target.instance,
            "__param_target": target.name,
            "__metrics_path__": metrics_path,
        }
        groups.append({"targets": [address], "labels": labels})
    return groups

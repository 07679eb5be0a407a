"""The status page's charts: a bounded history of each target's measures."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from lockwatch.publish.status.cells import escape
from lockwatch.state.target_view import TargetView
from lockwatch.text import format_duration

WAITING = "waiting"  # the series of waiting sessions
CHART_WINDOW = 3600.0  # seconds of history behind each chart


CHART_POINTS = 360  # at most this many points per chart; peaks win within a slot


def queue_series(queue: str) -> str:
    return f"queue {queue}"


def measures(view: TargetView) -> dict[str, float]:
    """What the charts plot, from one published view of a target: sessions
    waiting on advisory locks, and the depth of each queue; only what the
    view knows."""
    found: dict[str, float] = {}
    snapshot = None if view.status is None else view.status.snapshot
    if snapshot is not None:
        # Most polls have no waiter at all: the summary says so without a walk.
        unusual = snapshot.lock_summary().unusual
        ignored = view.target.locks.ignored
        found[WAITING] = float(
            sum(
                1
                for lock in (snapshot.locks if unusual else ())
                if not lock.granted and not ignored(lock.database, lock.key)
            )
        )
    for queue in view.queues:
        if queue.latest is not None:
            found[queue_series(queue.name)] = float(queue.latest.depth)
    return found


class History:
    """The last hour of each measure per target, fed by every published view."""

    def __init__(
        self,
        window: float = CHART_WINDOW,
        points: int = CHART_POINTS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window = window
        self.slot = window / points
        self._monotonic = monotonic
        self._series: dict[tuple[str, str], deque[tuple[float, float]]] = {}
        self._lock = threading.Lock()

    def record(self, view: TargetView) -> None:
        now = self._monotonic()
        for name, value in measures(view).items():
            with self._lock:
                series = self._series.setdefault((view.target.name, name), deque())
                if series and now - series[-1][0] < self.slot:
                    # One point per slot, the highest: a convoy that came and
                    # went between two slots still shows.
                    series[-1] = (series[-1][0], max(series[-1][1], value))
                else:
                    series.append((now, value))
                while series and now - series[0][0] > self.window:
                    series.popleft()

    def points(self, target: str, name: str) -> list[tuple[float, float]]:
        """(seconds ago, value) pairs, oldest first."""
        now = self._monotonic()
        with self._lock:
            series = list(self._series.get((target, name), ()))
        return [(now - at, value) for at, value in series if now - at <= self.window]


def _corners(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points where the line turns: the inner points of a flat run draw
    nothing (a quiet hour of 360 zeros is two points, and a page of 300
    targets no longer carries 300 of those hours).

    >>> _corners([(3.0, 0.0), (2.0, 0.0), (1.0, 0.0), (0.0, 5.0)])
    [(3.0, 0.0), (1.0, 0.0), (0.0, 5.0)]
    """
    last = len(points) - 1
    return [
        point
        for n, point in enumerate(points)
        if n in (0, last) or not points[n - 1][1] == point[1] == points[n + 1][1]
    ]


def sparkline(
    points: Sequence[tuple[float, float]], window: float, width: int = 240, height: int = 36
) -> str:
    """An inline SVG line of (seconds ago, value), newest at the right, over
    the points' own span (a daemon started a minute ago has a minute to show)
    up to ``window`` seconds."""
    span = min(max((ago for ago, _ in points), default=0.0), window) or window
    top = max((value for _, value in points), default=0.0)
    scale = max(top, 1.0)
    coords = " ".join(
        f"{width * (1 - min(ago, span) / span):.1f},{height - 2 - (height - 4) * value / scale:.1f}"
        for ago, value in _corners(points)
    )
    last = points[-1][1] if points else 0.0
    label = f"last {format_duration(span)}: now {last:g}, highest {top:g}"
    return (
        f'<svg class="chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{escape(label)}"><title>{escape(label)}</title>'
        f'<line x1="0" y1="{height - 1}" x2="{width}" y2="{height - 1}" class="axis"/>'
        + (f'<polyline points="{coords}"/>' if len(points) > 1 else "")
        + "</svg>"
    )

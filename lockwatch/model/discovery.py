"""What service discovery hands lockwatch, and how each target source fares.

A :class:`TargetGroup` is one entry of Prometheus' file_sd / http_sd format:
addresses (``host:port``) that share labels. :class:`SourceHealth` is what the
metrics and the log say about one ``target_sources`` entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class TargetGroup:
    targets: tuple[str, ...]  # each a __address__: host:port
    labels: tuple[tuple[str, str], ...] = ()

    def label(self, name: str) -> str | None:
        return next((value for key, value in self.labels if key == name), None)


@dataclass(frozen=True, slots=True)
class SourceHealth:
    """One target source as of its last read."""

    name: str
    kind: str  # file or http
    up: bool  # the last read succeeded (its list is in use)
    targets: int  # targets made from its last good list
    rejected: int  # entries of that list that made no target (each logged)
    reads_total: int
    errors_total: int
    last_success: datetime | None
    error: str | None  # why the last read failed, secret-free


@dataclass(frozen=True, slots=True)
class FleetStatus:
    """This instance's part of the fleet: its shard and its sources."""

    shard: int
    shards: int
    watched: int  # targets this shard watches
    sources: tuple[SourceHealth, ...] = ()

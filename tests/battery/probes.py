"""What the battery reads off a running lockwatch: its metrics as numbers, its
footprint (threads, file descriptors, memory) and its sessions on a server."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import psutil
import psycopg
import requests
from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True, slots=True)
class Scrape:
    """One /metrics answer."""

    text: str
    samples: tuple[tuple[str, dict[str, str], float], ...]

    @classmethod
    def parse(cls, text: str) -> Scrape:
        samples = tuple(
            (sample.name, dict(sample.labels), float(sample.value))
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        )
        return cls(text, samples)

    def get(self, name: str, **labels: str) -> float | None:
        for sample, their, value in self.samples:
            if sample == name and all(their.get(k) == v for k, v in labels.items()):
                return value
        return None

    def count(self, prefix: str) -> int:
        """Series whose name starts with ``prefix``."""
        return sum(1 for name, _, _ in self.samples if name.startswith(prefix))


def scrape(base: str, **kwargs: Any) -> Scrape:
    response = requests.get(f"{base}/metrics", timeout=10, **kwargs)
    response.raise_for_status()
    return Scrape.parse(response.text)


@dataclass(frozen=True, slots=True)
class Footprint:
    threads: int
    fds: int
    rss_mb: float

    def __str__(self) -> str:
        return f"{self.threads} threads, {self.fds} fds, {self.rss_mb:.0f} MB"


def footprint(pid: int) -> Footprint:
    process = psutil.Process(pid)
    return Footprint(process.num_threads(), process.num_fds(), process.memory_info().rss / 2**20)


def settled_footprint(pid: int, ceiling: Footprint, timeout: float = 10) -> Footprint:
    """The footprint once threads and fds are back within ``ceiling`` (an HTTP
    request's thread takes a moment to end), or as it is when time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        now = footprint(pid)
        if (now.threads <= ceiling.threads and now.fds <= ceiling.fds) or (
            time.monotonic() > deadline
        ):
            return now
        time.sleep(0.1)


def lockwatch_sessions(admin_dsn: str, database: str | None = None) -> int:
    """lockwatch's sessions on a server (in one database, if given)."""
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'lockwatch'"
            " AND (%(db)s::text IS NULL OR datname = %(db)s)",
            {"db": database},
        ).fetchone()
    return int(row[0]) if row else -1

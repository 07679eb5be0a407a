"""Debian's prometheus-postgres-exporter, with its default collectors, scraped
against the benchmark server for comparison."""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from bench.process import Process, http_get, samples
from bench.server import DATABASE, EXPORTER_ROLE, BenchServer
from lockwatch.demo.pgcluster import free_port

BINARY = "prometheus-postgres-exporter"
# What pg_locks_count calls the mode of an advisory lock taken by pg_advisory_lock().
ADVISORY_MODE = "exclusivelock"


@dataclass(frozen=True, slots=True)
class ExporterCost:
    locks: int
    server_ms: float  # per scrape, from pg_stat_statements
    scrape_ms: float  # median wall time of one scrape
    series: int
    # What the exporter says about the held advisory locks: its count of
    # exclusive locks in the benchmark database, whatever took them.
    exclusive_locks: float | None


def find_binary() -> str:
    path = shutil.which(BINARY) or shutil.which(BINARY, path="/usr/bin")
    if path is None:
        raise RuntimeError(
            f"{BINARY} is not installed: run scripts/bootstrap (it installs the Debian package)"
        )
    return path


class PostgresExporter(Process):
    """The exporter as its own process on a free loopback port."""

    def __init__(self, server: BenchServer, workdir: Path) -> None:
        self.port = free_port()
        env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
        # postgres_exporter's lib/pq takes URIs; the role has pg_monitor and no password
        # (the benchmark server trusts loopback).
        env["DATA_SOURCE_NAME"] = (
            f"postgresql://{EXPORTER_ROLE}@{server.cluster.host}:{server.cluster.port}"
            f"/{DATABASE}?sslmode=disable"
        )
        super().__init__(
            [find_binary(), f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            workdir / "postgres_exporter.log",
            env=env,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def __enter__(self) -> PostgresExporter:
        self.start_serving(self.url)
        return self

    def scrape(self) -> tuple[float, str]:
        started = time.perf_counter()
        text = http_get(self.url).text
        return time.perf_counter() - started, text


def advisory_count(text: str) -> float | None:
    counts = samples(text, "pg_locks_count", datname=DATABASE, mode=ADVISORY_MODE)
    return counts[0] if counts else None

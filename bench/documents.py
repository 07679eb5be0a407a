"""What lockwatch's documents cost to serve with many targets: one
``lockwatch run`` watching the same database under many names (the documents
at each number of locks come with the footprint, ``bench/daemon.py``)."""

from __future__ import annotations

import time
from pathlib import Path

from bench.daemon import PATHS, Documents, LockwatchProcess, measure_documents, target_config
from bench.process import samples
from bench.server import LOCKWATCH_ROLE, BenchServer

# Many targets poll rarely, so that what is measured is the documents.
MANY_INTERVAL = 30.0
STARTUP = 300.0  # seconds for every target's first poll
LOCKS = 100
# /api/v1/locks answers every lock of every target in one document (about
# 0.5 MB a target here) until it pages; it is measured at one target only.
MANY_PATHS = tuple(path for path in PATHS if path != "/api/v1/locks")


def measure_many(server: BenchServer, workdir: Path, targets: int) -> Documents:
    """``targets`` targets (the same database under different names) in one
    ``lockwatch run``, each polled once at least, then its documents."""
    server.release_locks()
    server.hold_locks(LOCKS)
    configs = [
        target_config(f"t{n:03d}", server.dsn(LOCKWATCH_ROLE), MANY_INTERVAL)
        for n in range(targets)
    ]
    with LockwatchProcess(configs, workdir, f"documents-{targets}") as daemon:
        deadline = time.monotonic() + STARTUP
        while True:
            polled = samples(daemon.get("/metrics")[1].decode(), "lockwatch_polls_total")
            if sum(1 for value in polled if value >= 1) >= targets:
                break
            daemon.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(polled)} of {targets} targets polled in time")
            time.sleep(1.0)
        return measure_documents(daemon, server.locks_held, targets, MANY_PATHS)

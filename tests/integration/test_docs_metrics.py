"""Every metric and label the README and the configuration reference name is one
that ``/metrics`` serves, with those labels; and every metric ``/metrics``
serves is in the reference. Checked against a real daemon with a lock convoy,
a queue, a worker group, a pinged job and a notifier (a replica's, which
elects its sender)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.paths import ROOT
from tests.fixtures.postgres import (
    PgDatabase,
    free_port,
    queue_on_lock,
    run_in_thread,
    wait_until,
)
from tests.fixtures.processes import LockwatchProcess, write_config

pytestmark = [pytest.mark.pg, pytest.mark.slow]

TOKEN = "0123456789abcdef0123"
# The queue's window must hold three CPU readings spanning 80 % of it before
# lockwatch_worker_cpu_cores is served: a 2 s window at 0.5 s polls was never
# covered on a machine slow enough to stretch each poll past 0.7 s.
TARGET_EXTRA = """\
locks: {named: [{name: webhook-delivery, key: 42}]}
queues:
  - name: webhooks
    sql: SELECT 3 AS depth, 2.5 AS oldest_age_seconds, 1 AS completed_total, 0 AS in_flight
    window: 5s
workers:
  - name: webhook-workers
    queues: [webhooks]
    processes: {cmdline: 'lockwatch'}
    sessions: ["webhook-worker-*"]
"""
MORE = """\
replica: docs
pings:
  token: ${PING_TOKEN}
  store: postgres
  dsn: ${STORE_DSN}
jobs:
  - name: nightly
    target: app
    schedule: {cron: "0 3 * * *"}
notify:
  channels:
    - name: hook
      type: webhook
      url: ${HOOK_URL}
    - name: am
      type: alertmanager
      urls: ["http://127.0.0.1:9"]
auth_modules: [{name: monitor, user: lockwatch}]
target_sources: [{name: inventory, file: inventory.json, auth_module: monitor}]
"""
# Words of the docs that look like metric names and are not.
NOT_METRICS = {"lockwatch_demo", "lockwatch_monitor"}
# Served with no sample here: the test server does not preload pg_stat_statements,
# no queue here is a job library's (test_lib_long_jobs reads the longest job,
# test_lib_queue_consumers the consumers), and a queue's normal throughput takes an
# hour of waiting work to learn (test_capacity).
NO_SAMPLE_HERE = {
    "lockwatch_poll_server_seconds",
    "lockwatch_queue_consumers",
    "lockwatch_queue_job_longest_running_seconds",
    "lockwatch_queue_normal_completed_per_minute",
}
METRIC = re.compile(r"`((?:lockwatch|process)_[a-z_]+)`")
ROW = re.compile(r"^\|\s*(`[^|]+`)\s*\|([^|]*)\|[^|]*\|[^|]*\|$", re.MULTILINE)


def served(text: str) -> dict[str, set[str]]:
    """Each series name /metrics serves, with the label names its samples carry."""
    series: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        if not family.samples:
            suffix = "_total" if family.type == "counter" else ""
            series.setdefault(family.name + suffix, set())
        for sample in family.samples:
            if family.type == "histogram" and sample.name == family.name + "_count":
                series.setdefault(family.name, set()).update(sample.labels)
            elif not sample.name.endswith(("_created", "_bucket", "_count", "_sum")):
                series.setdefault(sample.name, set()).update(sample.labels)
    return series


def waiters_on(base: str, key: str) -> int:
    targets = requests.get(f"{base}/api/v1/locks", timeout=5).json()["targets"]
    return sum(lock["waiter_count"] for t in targets for lock in t["locks"] if lock["key"] == key)


def documented() -> dict[str, set[str] | None]:
    """Each metric the docs name; its labels where a reference table gives them."""
    found: dict[str, set[str] | None] = {}
    for doc in (ROOT / "README.md", ROOT / "docs" / "configuration.md"):
        for name in METRIC.findall(doc.read_text(encoding="utf-8")):
            if name not in NOT_METRICS:
                found.setdefault(name, None)
    reference = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    metrics = reference.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    for names, labels in ROW.findall(metrics):
        for name in re.findall(r"`([a-z_]+)`", names):
            found[name] = set(re.findall(r"`([a-z_]+)`", labels))
    return found


@pytest.fixture
def lockwatch(tmp_path: Path, pg: PgDatabase) -> Iterator[LockwatchProcess]:
    port = free_port()
    config = write_config(tmp_path, port, {"app": pg.admin_dsn}, extra={"app": TARGET_EXTRA})
    config.write_text(config.read_text() + MORE)
    (tmp_path / "inventory.json").write_text("[]")  # a source that lists nothing yet
    # The pings' store is the target's database here: the sender election's metrics too.
    env = {"PING_TOKEN": TOKEN, "HOOK_URL": "http://127.0.0.1:9/", "STORE_DSN": pg.admin_dsn}
    process = LockwatchProcess(config, tmp_path / "lockwatch.log", port, env=env)
    process.start()
    yield process
    process.stop()


@pytest.mark.parametrize("pg_server", ["pg18"], indirect=True)
def test_the_docs_name_the_metrics_and_labels_metrics_serves(
    pg: PgDatabase, lockwatch: LockwatchProcess
) -> None:
    # A hold and a wait on key 43 that complete: the hold and wait histograms get series.
    first = pg.connect("report-1")
    first.execute("SELECT pg_advisory_lock(43)")
    second = queue_on_lock(pg.connect("report-2"), 43)
    wait_until(lambda: waiters_on(lockwatch.base, "43"), message="a wait seen")
    first.execute("SELECT pg_advisory_unlock(43)")
    second.join()
    holder = pg.connect("webhook-worker-1")
    holder.execute("SELECT pg_advisory_lock(42)")
    blocked = [queue_on_lock(pg.connect(f"webhook-worker-{n}"), 42) for n in (2, 3)]
    wait_until(lambda: lockwatch.finding("lock_convoy", "app"), message="a convoy")
    # A wait on a row: the lock wait series get their samples.
    pg.connect("setup").execute("CREATE TABLE jobs AS SELECT 1 AS id")
    row_holder = pg.connect("row-holder", autocommit=False)
    row_holder.execute("SELECT * FROM jobs FOR UPDATE")
    row_waiter = pg.connect("row-waiter")
    claim = run_in_thread(lambda: row_waiter.execute("SELECT * FROM jobs FOR UPDATE"))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    start = requests.post(f"{lockwatch.base}/ping/nightly/start", headers=auth, json={}, timeout=5)
    run_id = start.json()["run_id"]
    requests.post(
        f"{lockwatch.base}/ping/nightly/success", headers=auth, json={"run_id": run_id}, timeout=5
    ).raise_for_status()

    labelled = (
        "lockwatch_worker_cpu_cores",
        "lockwatch_job_last_duration_seconds",
        "lockwatch_advisory_lock_hold_duration_seconds",
        "lockwatch_advisory_lock_wait_duration_seconds",
        "lockwatch_lock_waiting_sessions",
        "lockwatch_lock_waiter_seconds_total",
    )
    unlabelled: list[str] = []  # the last scrape's, named if the wait fails

    def complete() -> dict[str, set[str]] | None:
        # Every series: the zeros a scrape leaves out of a quiet target's too.
        text = requests.get(f"{lockwatch.base}/metrics?detail=full", timeout=5).text
        series = served(text)
        unlabelled[:] = [name for name in labelled if not series.get(name)]
        return None if unlabelled else series

    try:
        series = wait_until(complete, timeout=30, message="every series with its labels")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; without labels: {unlabelled}") from None
    holder.close()
    for call in blocked:
        call.join()
    row_holder.rollback()
    claim.join()

    docs = documented()
    assert not set(docs) - set(series), "documented but not served"
    assert not {n for n in series if n.startswith("lockwatch_")} - set(docs), "served, undocumented"
    for name, labels in docs.items():
        if labels is not None and name not in NO_SAMPLE_HERE:
            assert labels == series[name], name
    assert all(not series[name] for name in NO_SAMPLE_HERE)
    with psycopg.connect(pg.admin_dsn) as conn:  # the target is still fine afterwards
        assert conn.execute("SELECT 1").fetchone() == (1,)

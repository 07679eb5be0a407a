"""The bundled rules in a real Prometheus scraping a real ``lockwatch run``
during a real convoy, an orphan holding several keys, a queue growing, a
leader lock nobody holds, a job started twice and a target that is down: what
Prometheus renders (``/api/v1/alerts``) names the
key, the database and the holder, and links to this lockwatch (its
``external_url``) and the runbooks it serves.

The same run captures the label shapes of ``lockwatch_incident_active`` from
the live ``/metrics`` and holds them to ``alerts/lockwatch.rules.series``, the
capture the promtool tests are checked against (``test_alerting_rules.py``):
set LOCKWATCH_RECAPTURE=1 to write it again from a run."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from lockwatch.demo.scenarios import (
    WEBHOOK_JOBS_DDL,
    ConvoyIncident,
    Producer,
    webhook_queue_sql,
)
from tests.fixtures.paths import ROOT
from tests.fixtures.postgres import MONITOR_USER, PgDatabase, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config
from tests.fixtures.prometheus import Prometheus, binary

pytestmark = [
    pytest.mark.pg,
    pytest.mark.slow,
    pytest.mark.parametrize("pg_server", ["pg18"], indirect=True),
]

RULES = ROOT / "alerts" / "lockwatch.rules.yml"
CAPTURE = ROOT / "alerts" / "lockwatch.rules.series"
LOCKS = "{max_hold: 1s, orphan_after: 1s, convoy_waiters: 2, convoy_wait: 1s}"
TOKEN = "live-alerts-ping-token-7c2e"
SWEEPER = "cron-sweeper"
SWEEPER_KEYS = (7001, 7002, 7003)


def shapes(exposition: str) -> list[str]:
    """The label shapes of the incident series in an exposition: one line per
    root kind, the names of the labels that carry a value (Prometheus drops
    empty ones), each shape once."""
    found: set[str] = set()
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == "lockwatch_incident_active":
                names = sorted(name for name, value in sample.labels.items() if value)
                found.add(f"{sample.name} root={sample.labels['root']}: {' '.join(names)}")
            elif sample.name == "lockwatch_web_info":
                found.add(f"{sample.name}: {' '.join(sorted(sample.labels))}")
    return sorted(found)


def config_of(tmp_path: Path, port: int, pg: PgDatabase) -> Path:
    down = f"postgresql://lockwatch@127.0.0.1:{free_port()}/app"  # nothing listens there
    sql = webhook_queue_sql(completed=False).replace("\n", " ")
    main = (
        "locks: {named: [{name: scheduler-leader, key: 9100, role: leader}]}\n"
        f"queues:\n  - {{name: webhooks, sql: {sql!r}, window: 6s, min_growth: 0.2}}\n"
    )
    config = write_config(
        tmp_path, port, {"main": pg.monitor_dsn, "gone": down}, locks=LOCKS, extra={"main": main}
    )
    with config.open("a") as more:
        more.write(
            "pings: {token: '${LOCKWATCH_PING_TOKEN}'}\n"
            "jobs:\n"
            "  - name: nightly\n"
            "    target: main\n"
            "    schedule: {cron: '0 3 * * *'}\n"
        )
    return config


def start_twice(lockwatch: LockwatchProcess) -> None:
    """The nightly job started by two hosts for one run key."""
    for host in ("batch-1.example.internal", "batch-2.example.internal"):
        answer = requests.post(
            f"{lockwatch.base}/ping/nightly/start",
            data=json.dumps({"host": host, "run_key": "2026-12-01"}),
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=10,
        )
        assert answer.status_code < 300, answer.text


def firing(prometheus: Prometheus, **labels: str) -> dict[str, Any] | None:
    for alert in prometheus.alerts("firing"):
        if all(alert["labels"].get(k) == v for k, v in labels.items()):
            return alert
    return None


def test_the_bundled_alerts_name_key_database_and_holder_in_a_real_prometheus(
    tmp_path: Path, pg: PgDatabase
) -> None:
    binary("prometheus")
    port = free_port()
    base = f"http://lockwatch.test:{port}"
    lockwatch = LockwatchProcess(
        config_of(tmp_path, port, pg),
        tmp_path / "lockwatch.log",
        port,
        # --web.external-url, as a container would set it
        env={"LOCKWATCH_PING_TOKEN": TOKEN, "LOCKWATCH_WEB_EXTERNAL_URL": f"{base}/"},
    )
    convoy = ConvoyIncident(pg.admin_dsn, waiters=2)
    with pg.connect() as admin:
        admin.execute(WEBHOOK_JOBS_DDL)
        admin.execute(f"GRANT SELECT ON webhook_jobs TO {MONITOR_USER}")
    producer = Producer(pg.admin_dsn, 4.0, lambda n: "http://127.0.0.1:9/")  # nobody works
    with (
        psycopg.connect(pg.admin_dsn, autocommit=True) as sweeper,
        Prometheus(
            tmp_path / "prom", scrape={"lockwatch": [f"127.0.0.1:{port}"]}, rule_files=[RULES]
        ) as prometheus,
    ):
        sweeper.execute(f"SET application_name = '{SWEEPER}'")
        for key in SWEEPER_KEYS:
            sweeper.execute("SELECT pg_advisory_lock(%s)", (key,))
        lockwatch.start()
        try:
            convoy.start()
            assert convoy.holder is not None
            producer.start()
            start_twice(lockwatch)
            holder = wait_until(
                lambda: firing(prometheus, pid=str(convoy.holder.pid) if convoy.holder else ""),
                timeout=90,
                message="the convoy's alert firing in Prometheus",
            )
            said = holder["annotations"]["summary"] + " " + holder["annotations"]["description"]
            assert holder["labels"]["lock"] == "42" and holder["labels"]["database"] == pg.database
            assert f"lock 42 in {pg.database}" in said, said
            assert f"pid {convoy.holder.pid} · webhook-worker-1 · " in said, said
            assert f"{base}/api/v1/incidents/{holder['labels']['incident']}." in said, said
            anchor = holder["labels"]["alertname"].lower()
            assert holder["annotations"]["runbook_url"] == f"{base}/runbooks#{anchor}"

            orphan = wait_until(
                lambda: firing(prometheus, application=SWEEPER),
                timeout=90,
                message="the sweeper's orphaned locks firing",
            )
            said = orphan["annotations"]["summary"] + " " + orphan["annotations"]["description"]
            lock = orphan["labels"]["lock"]
            assert lock in {str(k) for k in SWEEPER_KEYS}, orphan["labels"]
            assert f"lock {lock} in {pg.database}" in said and f"· {SWEEPER} · " in said, said
            assert "It holds 3 locks." in said, said

            job = wait_until(
                lambda: firing(prometheus, alertname="LockwatchJobDuplicateStart"),
                timeout=90,
                message="the duplicate start firing",
            )
            assert "job nightly started more than once" in job["annotations"]["summary"]
            down = wait_until(
                lambda: firing(prometheus, alertname="LockwatchTargetDown"),
                timeout=90,
                message="the target that is down firing",
            )
            assert down["annotations"]["summary"].startswith("lockwatch cannot sample gone")
            incident = requests.get(
                f"{lockwatch.base}/api/v1/incidents/{down['labels']['incident']}", timeout=10
            ).json()["incident"]
            assert incident["title"].startswith("target gone down: Connection refused ("), incident
            leader = wait_until(
                lambda: firing(prometheus, alertname="LockwatchLeaderLockMissing"),
                timeout=90,
                message="the leader lock nobody holds firing",
            )
            assert (
                "leader lock scheduler-leader is held by nobody" in leader["annotations"]["summary"]
            )
            growing = wait_until(
                lambda: firing(prometheus, alertname="LockwatchQueueGrowing"),
                timeout=90,
                message="the queue nobody works firing",
            )
            assert "queue webhooks keeps growing" in growing["annotations"]["summary"]

            captured = shapes(requests.get(f"{lockwatch.base}/metrics", timeout=10).text)
            if os.environ.get("LOCKWATCH_RECAPTURE") == "1":
                CAPTURE.write_text(HEADER + "\n".join(captured) + "\n")
            committed = [
                line for line in CAPTURE.read_text().splitlines() if line and line[0] != "#"
            ]
            assert captured == committed, (
                "the live label shapes differ from alerts/lockwatch.rules.series: "
                "run with LOCKWATCH_RECAPTURE=1 and update the promtool tests to match"
            )
        finally:
            producer.stop()
            convoy.stop()
            assert lockwatch.stop() in (0, -signal.SIGKILL), lockwatch.log(whole=True)


HEADER = """\
# The label shapes lockwatch exports for its incidents, captured from a live
# /metrics (a convoy, an orphan holding several keys, a queue growing, a leader
# lock nobody holds, a job started twice, a target that is down) by tests/integration/test_alerts_live.py, which fails
# when a run disagrees; LOCKWATCH_RECAPTURE=1 writes it again. The promtool
# tests (lockwatch.rules.test.yml) feed the rules these shapes only.
"""

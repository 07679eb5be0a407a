"""The Grafana dashboard: importable and provisionable as it is, and every
query of every panel returns data from a real Prometheus that scraped
``lockwatch run`` during a replay of the seed incidents."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests
import yaml

from lockwatch.demo.scenarios import OrphanIncident, WebhookQueueIncident, webhook_queue_sql
from lockwatch.publish.metrics.registry import SUBJECT_LABELS
from tests.fixtures.paths import ROOT
from tests.fixtures.postgres import PgDatabase, free_port, run_in_thread, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config
from tests.fixtures.prometheus import Prometheus

DASHBOARD_FILE = ROOT / "grafana" / "lockwatch.json"
PROVISIONING_FILE = ROOT / "grafana" / "provisioning" / "lockwatch.yml"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
PING_TOKEN = "dashboard-ping-token-5d2e"
# What Grafana would put in place of the variables with "All" selected and a
# 1 s scrape interval (rate windows of four scrapes).
SUBSTITUTIONS = {
    "$__rate_interval": "4s",
    "$job": ".*",
    "$instance": ".*",
    "$target": ".*",
}


def dashboard() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(DASHBOARD_FILE.read_text())
    return document


def panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def expressions() -> list[tuple[str, str, bool]]:
    """(panel title / refId, expr, instant) of every panel query."""
    return [
        (f"{panel['title']} / {target['refId']}", target["expr"], bool(target.get("instant")))
        for panel in panels()
        for target in panel["targets"]
    ]


def variables() -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in dashboard()["templating"]["list"]}


def substitute(expr: str) -> str:
    for name in sorted(SUBSTITUTIONS, key=len, reverse=True):
        expr = expr.replace(name, SUBSTITUTIONS[name])
    assert "$" not in expr, f"a variable the test does not know in {expr}"
    return expr


def test_the_dashboard_has_a_fixed_uid_and_takes_its_datasource_from_a_variable() -> None:
    text = DASHBOARD_FILE.read_text()
    board = dashboard()

    assert board["uid"] == "lockwatch"
    assert "__inputs" not in board
    assert "${DS_" not in text, "import-time inputs break provisioning"
    source = variables()["datasource"]
    assert (source["type"], source["query"]) == ("datasource", "prometheus")


def test_job_instance_and_target_variables_query_the_chosen_datasource() -> None:
    found = variables()

    for name in ("job", "instance", "target"):
        variable = found[name]
        assert variable["type"] == "query"
        assert variable["datasource"] == DATASOURCE
        assert variable["includeAll"] and variable["multi"]
        assert variable["allValue"] == ".*"
    assert '{job=~"$job", instance=~"$instance"}' in found["target"]["definition"]


def test_every_panel_has_a_unit_a_description_and_the_datasource_variable() -> None:
    for panel in panels():
        title = panel["title"]
        assert panel["description"].strip(), f"{title}: no description"
        assert panel["fieldConfig"]["defaults"]["unit"], f"{title}: no unit"
        assert panel["datasource"] == DATASOURCE, title
        assert panel["targets"], f"{title}: no query"
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, title


def test_every_query_filters_by_the_variables_and_rates_over_the_rate_interval() -> None:
    for where, expr, _ in expressions():
        assert 'job=~"$job"' in expr and 'instance=~"$instance"' in expr, where
        if "lockwatch_" in expr:
            assert 'target=~"$target"' in expr, where
        windows = re.findall(r"\[([^\]]+)\]", expr)
        assert all(window == "$__rate_interval" for window in windows), where
        if re.search(r"\b(rate|irate|increase)\(", expr):
            assert windows, where


def test_rows_cover_findings_locks_lock_waits_queues_jobs_and_lockwatch_itself() -> None:
    rows = [p["title"] for p in dashboard()["panels"] if p["type"] == "row"]
    ids = [p["id"] for p in dashboard()["panels"]]

    assert rows == [
        "Active findings",
        "Advisory locks",
        "Lock waits",
        "Queues and workers",
        "Jobs",
        "lockwatch health",
    ]
    assert len(ids) == len(set(ids))
    for panel in dashboard()["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]


def test_queue_depth_and_worker_cpu_share_one_panel_on_two_axes() -> None:
    (panel,) = [p for p in panels() if p["title"] == "Queue depth and worker CPU"]
    exprs = " ".join(target["expr"] for target in panel["targets"])

    assert "lockwatch_queue_depth" in exprs and "lockwatch_worker_cpu_seconds_total" in exprs
    (override,) = panel["fieldConfig"]["overrides"]
    properties = {prop["id"]: prop["value"] for prop in override["properties"]}
    assert properties["custom.axisPlacement"] == "right"
    assert properties["unit"] == "percentunit"


def test_the_findings_table_names_every_part_of_a_subject() -> None:
    (panel,) = [p for p in panels() if p["title"] == "Active findings by subject"]
    (target,) = panel["targets"]

    grouping = re.search(r"by \(([^)]*)\)", target["expr"])
    assert grouping is not None
    assert {label.strip() for label in grouping.group(1).split(",")} == {
        "target",
        "kind",
        *SUBJECT_LABELS,
    }


def test_blocked_by_counts_incidents_and_their_waiters_per_blocker_fingerprint() -> None:
    (panel,) = [p for p in panels() if p["title"] == "Blocked by (query fingerprint)"]
    incidents, waiting = (target["expr"] for target in panel["targets"])

    for expr in (incidents, waiting):
        assert expr.startswith(
            ("count by (target, blocking_query) ", "sum by (target, blocking_query) ")
        )
        assert 'blocking_query!=""' in expr, "incidents without a holding session have no blocker"
    # Waiters are per incident: each joins its own incident's fingerprint, one
    # lockwatch (job, instance) apart from another's.
    assert "* on (job, instance, target, incident) group_left (blocking_query)" in waiting
    renamed = panel["transformations"][-1]["options"]["renameByName"]
    assert (renamed["Value #A"], renamed["Value #B"]) == ("open incidents", "sessions waiting")


def test_the_provisioning_example_points_grafana_at_a_dashboards_directory() -> None:
    provisioning = yaml.safe_load(PROVISIONING_FILE.read_text())

    assert provisioning["apiVersion"] == 1
    (provider,) = provisioning["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"].startswith("/")


def ping(lockwatch: LockwatchProcess, event: str, body: dict[str, Any]) -> dict[str, Any]:
    response = requests.post(
        f"{lockwatch.base}/ping/nightly-report/{event}",
        data=json.dumps(body),
        headers={"Authorization": f"Bearer {PING_TOKEN}"},
        timeout=5,
    )
    response.raise_for_status()
    answer: dict[str, Any] = response.json()
    return answer


def superuser_look(pg: PgDatabase, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(pg.admin_dsn, autocommit=True) as admin:
        return admin.execute(query).fetchall()


def migration_waits_on(pg: PgDatabase) -> list[str]:
    """Ground truth: the relations the migration's session waits to lock."""
    rows = superuser_look(
        pg,
        "SELECT l.relation::regclass::text FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
        " WHERE a.application_name = 'migration' AND NOT l.granted AND l.locktype = 'relation'",
    )
    return [relation for (relation,) in rows]


@pytest.fixture
def replay(tmp_path: Path, pg: PgDatabase) -> Iterator[LockwatchProcess]:
    """``lockwatch run`` watching seed 002 whole (webhook workers stalled
    behind a hung delivery under lock 42, the queue growing, the delivery its
    longest-running job), the orphan of seed 003, a pinged job that ran twice
    for one night (seed 000), and a migration's ALTER TABLE waiting behind a
    report idle in its transaction (lock waiter-seconds on a relation)."""
    incident = WebhookQueueIncident(pg.admin_dsn)
    incident.prepare()
    with psycopg.connect(pg.admin_dsn, autocommit=True) as admin:
        admin.execute(f"GRANT SELECT ON webhook_jobs TO {pg.monitor_user}")
    # The workers are threads of this process: its CPU is theirs.
    pidfile = tmp_path / "workers.pid"
    pidfile.write_text(f"{os.getpid()}\n")
    queue_sql = json.dumps(webhook_queue_sql(consumers=True, running=True))
    port = free_port()
    config = write_config(
        tmp_path,
        port,
        {"main": pg.monitor_dsn},
        locks="{max_hold: 2s, orphan_after: 2s, convoy_waiters: 2, convoy_wait: 1s, "
        "idle_blocker_wait: 1s}",
        extra={
            "main": f"""queues:
  - {{name: webhooks, sql: {queue_sql}, window: 5s, min_growth: 0.1, stall_cpu: 0.5}}
workers:
  - name: webhook-workers
    queues: [webhooks]
    processes: {{pidfile: {pidfile}, children: false}}
    sessions: ["webhook-worker-*"]"""
        },
    )
    (tmp_path / "ping-token").write_text(PING_TOKEN)
    config.write_text(
        config.read_text()
        + f"pings: {{token_file: {tmp_path / 'ping-token'}}}\n"
        + "jobs:\n  - {name: nightly-report, target: main, schedule: {cron: '0 3 * * *'}}\n"
    )
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    orphan = OrphanIncident(pg.admin_dsn)
    lockwatch.start()
    incident.start()
    orphan.start()
    run_id = ping(lockwatch, "start", {"run_key": "2026-11-29", "host": "app-1"})["run_id"]
    ping(lockwatch, "success", {"run_id": run_id, "exit_code": 0})
    ping(lockwatch, "start", {"run_key": "2026-11-29", "host": "app-2"})
    pg.connect("setup").execute("CREATE TABLE invoices (id int PRIMARY KEY)")
    report = pg.connect("report", autocommit=False)
    report.execute("SELECT count(*) FROM invoices")
    migration = pg.connect("migration")
    alter = run_in_thread(lambda: migration.execute("ALTER TABLE invoices ADD COLUMN note text"))
    wait_until(lambda: migration_waits_on(pg), message="the ALTER waits behind the report")
    try:
        yield lockwatch
    finally:
        report.rollback()
        alter.result()
        incident.stop()
        orphan.stop()
        assert lockwatch.stop() == 0, lockwatch.log(whole=True)


@pytest.mark.slow
@pytest.mark.parametrize("pg_server", ["pg18"], indirect=True)
def test_every_panel_query_returns_data_from_prometheus_during_a_replay(
    tmp_path: Path, pg: PgDatabase, replay: LockwatchProcess
) -> None:
    wait_until(lambda: replay.finding("lock_orphaned", "main"), message="the orphan is found")
    wait_until(lambda: replay.finding("lock_convoy", "main"), message="the convoy is found")
    wait_until(
        lambda: replay.finding("job_duplicate_start", "main"), message="the second start is found"
    )
    host_port = replay.base.removeprefix("http://")
    with Prometheus(tmp_path / "prometheus", scrape={"lockwatch": [host_port]}) as prometheus:
        queries = [(where, substitute(expr), instant) for where, expr, instant in expressions()]

        def empty() -> list[str]:
            now = time.time()
            missing = []
            for where, expr, instant in queries:
                if instant:
                    result = prometheus.query(expr)
                else:
                    answer = prometheus.get(
                        "/api/v1/query_range",
                        query=expr,
                        start=str(now - 30),
                        end=str(now),
                        step="1s",
                    )
                    result = answer["data"]["result"]
                if not result:
                    missing.append(f"{where}: {expr}")
            return missing

        # Rates need a few scrapes first; then nothing may stay empty.
        missing: list[str] = []

        def all_have_data() -> bool:
            missing[:] = empty()
            return not missing

        try:
            wait_until(all_have_data, timeout=60, interval=1)
        except AssertionError:
            raise AssertionError("panels without data:\n" + "\n".join(missing)) from None

        # The lock wait panels show what the server shows: the relation the
        # migration waits on, and the query of the report it waits behind.
        def shown(title: str, label: str) -> set[str]:
            (expr,) = [expr for where, expr, _ in queries if where == f"{title} / A"]
            return {series["metric"][label] for series in prometheus.query(expr)}

        relations = set(migration_waits_on(pg))
        wait_until(
            lambda: relations <= shown("Lock waiter-seconds", "relation"),
            message=f"the waits on {relations} are shown",
            interval=0.5,
        )
        ((query, query_id),) = superuser_look(
            pg, "SELECT query, query_id FROM pg_stat_activity WHERE application_name = 'report'"
        )
        # Its text has no constant to take out; a computed query id stands for it.
        fingerprint = query if query_id is None else f"query_id:{query_id}"
        wait_until(
            lambda: fingerprint in shown("Blocked by (query fingerprint)", "blocking_query"),
            message=f"the report ({fingerprint}) is shown as a blocker",
            interval=0.5,
        )

        for name in ("job", "instance", "target"):
            definition = substitute(variables()[name]["definition"])
            match = re.fullmatch(r"label_values\((.+), (\w+)\)", definition)
            assert match is not None, definition
            values = prometheus.get(
                f"/api/v1/label/{match.group(2)}/values", **{"match[]": match.group(1)}
            )["data"]
            assert values, f"variable {name} would offer nothing"
        targets = prometheus.get("/api/v1/label/target/values", **{"match[]": "lockwatch_up"})
        assert targets["data"] == ["main"]

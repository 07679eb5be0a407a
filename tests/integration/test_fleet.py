"""A fleet on real servers: targets found in a file_sd file and an http_sd
endpoint, split over three shards (three in-process daemons, each with its own
HTTP server), following the lists without a restart; a target that leaves the
list and comes back keeps its incident; a failing endpoint keeps its last good
list; the shipped Prometheus config in a real Prometheus, with two replicas
and per-target probes from /api/v1/sd."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from lockwatch.cli import main
from lockwatch.config.load import load_settings
from lockwatch.daemon import Daemon
from lockwatch.demo.pgbinaries import embedded_bin_dir
from lockwatch.demo.pgcluster import LocalCluster
from lockwatch.settings.sharding import Shard, owner
from tests.fixtures.paths import ROOT
from tests.fixtures.postgres import (
    MONITOR_PASSWORD,
    MONITOR_USER,
    PgDatabase,
    free_port,
    wait_until,
)
from tests.fixtures.processes import LockwatchProcess
from tests.fixtures.prometheus import Prometheus
from tests.fixtures.sd import SdStandin

pytestmark = [
    pytest.mark.slow,
    # Discovery and sharding are lockwatch's business, not the server's: one version.
    pytest.mark.parametrize("pg_server", ["pg18"], indirect=True),
]

SHARDS = 3
ALIASES = ("127.0.0.1", "localhost", "127.1")  # one server under three addresses
PROMETHEUS_CONFIG = ROOT / "deploy" / "prometheus" / "lockwatch-fleet.yml"
UP_WAIT = 90.0  # fifty first connections on a shared two-core machine
# For the tests that edit their file_sd file: read every 200 ms, not every 5 s
# (the default), so each edit is seen within a poll or two instead of seconds.
FILE_REFRESH = "refresh_interval: 200ms"


def side_by_side(step: Callable[[LocalCluster], None], clusters: list[LocalCluster]) -> None:
    """``step`` on every cluster at once: their initdb, start or stop overlap."""
    with ThreadPoolExecutor(len(clusters)) as pool:
        list(pool.map(step, clusters))


@pytest.fixture(scope="module")
def more_clusters() -> Iterator[list[LocalCluster]]:
    """Two more real servers besides the session's."""
    clusters = [LocalCluster(embedded_bin_dir()) for _ in range(2)]
    try:
        side_by_side(LocalCluster.start, clusters)
        for cluster in clusters:
            cluster.create_password_role(MONITOR_USER, MONITOR_PASSWORD, "pg_monitor")
        yield clusters
    finally:
        side_by_side(LocalCluster.close, clusters)


def config(tmp_path: Path, sources: str, locks: str = "") -> Path:
    (tmp_path / "monitor-password").write_text(MONITOR_PASSWORD)
    path = tmp_path / "lockwatch.yml"
    path.write_text(
        f"""
defaults:
  interval: 1s
  connect_timeout: 5s
{locks}
auth_modules:
  - name: monitor
    user: {MONITOR_USER}
    password_file: monitor-password
    sslmode: disable
target_sources:
{sources}
""",
        encoding="utf-8",
    )
    return path


def write_sd(path: Path, groups: list[dict[str, Any]]) -> None:
    """As file_sd writers do: a new file renamed over the old one."""
    part = path.with_name(path.name + ".new")
    part.write_text(json.dumps(groups), encoding="utf-8")
    os.replace(part, path)


@contextmanager
def daemon_of(path: Path, state: Path, shard: Shard | None = None) -> Iterator[Daemon]:
    settings = replace(load_settings(path), listen=f"127.0.0.1:{free_port()}", state_dir=state)
    state.mkdir()
    daemon = Daemon(settings, shard=shard, reload=lambda: load_settings(path))
    daemon.start()
    watching = threading.Thread(target=daemon.watch, daemon=True)
    watching.start()
    try:
        yield daemon
    finally:
        daemon.request_stop()
        watching.join()
        daemon.stop()


def base(daemon: Daemon) -> str:
    host, port = daemon.http.address
    return f"http://{host}:{port}"


def watched(daemon: Daemon) -> set[str]:
    groups = requests.get(f"{base(daemon)}/api/v1/sd", timeout=5).json()
    assert all(group["targets"] == [base(daemon).removeprefix("http://")] for group in groups)
    return {group["labels"]["__param_target"] for group in groups}


def metric(daemon: Daemon, name: str, **labels: str) -> float | None:
    text = requests.get(f"{base(daemon)}/metrics", timeout=5).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


def all_up(daemon: Daemon) -> bool:
    return all(metric(daemon, "lockwatch_up", target=name) == 1 for name in watched(daemon))


def fleet(
    clusters: list[LocalCluster], aliases: int
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """file_sd groups: each server under each address, in two databases, and
    ``aliases`` more names for them; with each target's instance by name."""
    groups: list[dict[str, Any]] = []
    instances: dict[str, str] = {}
    for index, cluster in enumerate(clusters):
        for host in ALIASES:
            address = f"{host}:{cluster.port}"
            groups.append({"targets": [address], "labels": {"cluster": f"c{index}"}})
            groups.append({"targets": [address], "labels": {"database": "template1"}})
            name = address.replace(":", "_")
            instances[name] = instances[f"{name}_template1"] = address
    for k in range(aliases):
        address = f"127.0.0.1:{clusters[k % len(clusters)].port}"
        groups.append({"targets": [address], "labels": {"name": f"alias-{k}"}})
        instances[f"alias-{k}"] = address
    return groups, instances


def split(instances: dict[str, str]) -> dict[int, set[str]]:
    return {
        shard: {name for name, address in instances.items() if owner(address, SHARDS) == shard}
        for shard in range(SHARDS)
    }


def printed_assignment(path: Path) -> dict[int, set[str]]:
    result = CliRunner().invoke(main, ["check-config", str(path), "--shards", str(SHARDS)])
    assert result.exit_code == 0, result.output
    shards: dict[int, set[str]] = {}
    for line in result.output.splitlines():
        if line.startswith("shard "):
            current = shards.setdefault(int(line.split()[1].split("/")[0]), set())
        elif line.startswith("  "):
            current.add(line.split()[0])
    return shards


def test_fifty_discovered_targets_are_split_over_three_shards_and_follow_the_file(
    tmp_path: Path, pg: PgDatabase, more_clusters: list[LocalCluster]
) -> None:
    clusters = [pg.server, *more_clusters]
    groups, instances = fleet(clusters, aliases=32)
    assert len(instances) == 50
    sd_file = tmp_path / "fleet.json"
    write_sd(sd_file, groups)
    path = config(
        tmp_path, f"  - {{name: fleet, file: {sd_file}, auth_module: monitor, {FILE_REFRESH}}}"
    )
    assert printed_assignment(path) == split(instances)

    with ExitStack() as stack:
        daemons = [
            stack.enter_context(daemon_of(path, tmp_path / f"state-{i}", Shard(i, SHARDS)))
            for i in range(SHARDS)
        ]
        parts = [watched(daemon) for daemon in daemons]
        # no target watched twice, none by nobody, each where the hash puts it
        assert sum(len(part) for part in parts) == 50
        assert set().union(*parts) == set(instances)
        assert dict(enumerate(parts)) == split(instances)
        for index, daemon in enumerate(daemons):
            wait_until(partial(all_up, daemon), timeout=UP_WAIT, message=f"shard {index} up")
            assert metric(daemon, "lockwatch_shard_targets") == len(parts[index])
            assert metric(daemon, "lockwatch_shard_info", shard=str(index), shards="3") == 1
            labels = {"source": "fleet", "kind": "file"}
            assert metric(daemon, "lockwatch_target_source_up", **labels) == 1

        # A per-target probe, as /api/v1/sd offers it: that target's series only.
        # (on the first shard that watches any: the hash may leave one empty)
        probed, prober = next(
            (min(part), d) for part, d in zip(parts, daemons, strict=True) if part
        )
        text = requests.get(f"{base(prober)}/metrics?target={probed}", timeout=5).text
        shown = {
            sample.labels["target"]
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if "target" in sample.labels
        }
        assert shown == {probed}

        # The file changes: four names go, three come; nobody restarts.
        runners = [{r.target.name: r for r in daemon.runners} for daemon in daemons]
        write_sd(
            sd_file,
            groups[:-4]
            + [
                {"targets": [f"127.0.0.1:{clusters[2].port}"], "labels": {"name": f"new-{k}"}}
                for k in range(3)
            ],
        )
        expected = (set(instances) - {f"alias-{k}" for k in range(28, 32)}) | {
            f"new-{k}" for k in range(3)
        }

        def parts_now() -> list[set[str]] | None:
            found = [watched(daemon) for daemon in daemons]
            return found if set().union(*found) == expected else None

        found = wait_until(parts_now, timeout=30, message="the edit applied")
        assert sum(map(len, found)) == len(expected) == 49  # still none watched twice
        new_address = f"127.0.0.1:{clusters[2].port}"
        owning = daemons[owner(new_address, SHARDS)]
        wait_until(
            lambda: all(metric(owning, "lockwatch_up", target=f"new-{k}") == 1 for k in range(3)),
            message="the new targets up",
        )
        # the targets that stayed kept their runners: nothing restarted them
        for before, daemon in zip(runners, daemons, strict=True):
            for runner in daemon.runners:
                if runner.target.name in before:
                    assert runner is before[runner.target.name]


def open_incident(daemon: Daemon, target: str) -> tuple[str, str] | None:
    """The id of the target's open incident and when its lock finding began."""
    document = requests.get(f"{base(daemon)}/api/v1/incidents?state=open", timeout=5).json()
    findings = requests.get(f"{base(daemon)}/api/v1/findings", timeout=5).json()["findings"]
    since = next(
        (
            f["since"]
            for f in findings
            if f["target"] == target and f["kind"] == "lock_held_too_long"
        ),
        None,
    )
    ids = [i["id"] for i in document["incidents"] if i["target"] == target]
    return (ids[0], since) if ids and since else None


def test_a_target_that_leaves_the_list_and_comes_back_keeps_its_incident(
    tmp_path: Path, pg: PgDatabase
) -> None:
    pg.connect("nightly-report").execute("SELECT pg_advisory_lock(4242)")
    sd_file = tmp_path / "fleet.json"
    held = {
        "targets": [f"127.0.0.1:{pg.server.port}"],
        "labels": {"name": "held", "database": pg.database},
    }
    write_sd(sd_file, [held])
    path = config(
        tmp_path,
        f"  - {{name: fleet, file: {sd_file}, auth_module: monitor, keep_vanished: 1h,"
        f" {FILE_REFRESH}}}",
        locks="  locks: {max_hold: 1s}",
    )
    with daemon_of(path, tmp_path / "state") as daemon:
        before = wait_until(lambda: open_incident(daemon, "held"), message="incident opened")
        write_sd(sd_file, [])
        wait_until(lambda: watched(daemon) == set() or None, message="held gone")
        assert open_incident(daemon, "held") is None  # not published while away
        write_sd(sd_file, [held])
        after = wait_until(lambda: open_incident(daemon, "held"), message="held back")

    assert after == before  # the same incident, the finding from the same moment


def test_a_target_gone_longer_than_keep_vanished_starts_afresh(
    tmp_path: Path, pg: PgDatabase
) -> None:
    pg.connect("nightly-report").execute("SELECT pg_advisory_lock(4243)")
    sd_file = tmp_path / "fleet.json"
    held = {"targets": [f"127.0.0.1:{pg.server.port}"], "labels": {"name": "held"}}
    write_sd(sd_file, [held])
    path = config(
        tmp_path,
        f"  - {{name: fleet, file: {sd_file}, auth_module: monitor, keep_vanished: 0s,"
        f" {FILE_REFRESH}}}",
        locks="  locks: {max_hold: 1s}",
    )
    state_file = tmp_path / "state" / "target-held.json"
    with daemon_of(path, tmp_path / "state") as daemon:
        before = wait_until(lambda: open_incident(daemon, "held"), message="incident opened")
        wait_until(state_file.exists, message="state saved")
        write_sd(sd_file, [])
        wait_until(lambda: not state_file.exists(), message="state forgotten")
        write_sd(sd_file, [held])
        after = wait_until(lambda: open_incident(daemon, "held"), message="held back")

    assert after[0] != before[0]


def test_an_http_sd_endpoint_that_fails_keeps_its_last_good_list(
    tmp_path: Path, pg: PgDatabase
) -> None:
    standin = SdStandin()
    address = f"127.0.0.1:{pg.server.port}"
    standin.groups = [{"targets": [address], "labels": {"name": "web-a"}}]
    path = config(
        tmp_path,
        f"  - {{name: inventory, url: '{standin.url}', auth_module: monitor,"
        " refresh_interval: 200ms, timeout: 1s}",
    )
    labels = {"source": "inventory", "kind": "http"}
    try:
        with daemon_of(path, tmp_path / "state") as daemon:
            assert watched(daemon) == {"web-a"}
            wait_until(lambda: metric(daemon, "lockwatch_up", target="web-a") == 1, message="up")

            standin.status = 500
            wait_until(
                lambda: metric(daemon, "lockwatch_target_source_up", **labels) == 0,
                message="source down",
            )
            assert watched(daemon) == {"web-a"}
            errors = metric(daemon, "lockwatch_target_source_errors_total", **labels) or 0

            standin.status = 200
            standin.hang()  # answers nothing: the request's deadline ends it
            wait_until(
                lambda: (
                    (metric(daemon, "lockwatch_target_source_errors_total", **labels) or 0) > errors
                ),
                message="the hanging request counted as an error",
            )
            assert watched(daemon) == {"web-a"}

            standin.groups = [{"targets": [address], "labels": {"name": "web-b"}}]
            standin.recover()
            wait_until(lambda: watched(daemon) == {"web-b"} or None, message="the new list")
            assert metric(daemon, "lockwatch_target_source_up", **labels) == 1

            standin.groups = []  # an empty list is a list: its targets go
            wait_until(lambda: watched(daemon) == set() or None, message="the empty list")
            assert metric(daemon, "lockwatch_target_source_up", **labels) == 1
            assert metric(daemon, "lockwatch_target_source_targets", **labels) == 0
    finally:
        standin.close()


def test_lockwatch_run_takes_its_shard_from_a_pod_name_as_kubernetes_expands_it(
    tmp_path: Path, pg: PgDatabase
) -> None:
    hosts = (*ALIASES, "127.0.1")
    addresses = [f"{host}:{pg.server.port}" for host in hosts]
    sd_file = tmp_path / "fleet.json"
    write_sd(sd_file, [{"targets": addresses}])
    path = config(tmp_path, f"  - {{name: fleet, file: {sd_file}, auth_module: monitor}}")
    port = free_port()
    path.write_text(
        f"listen: 127.0.0.1:{port}\nstate_dir: {tmp_path}\n" + path.read_text(encoding="utf-8")
    )
    # --shard=$(POD_NAME)/$(LOCKWATCH_SHARDS) in the StatefulSet, expanded
    env = {"LOCKWATCH_SHARD": "lockwatch-a-1/2"}
    process = LockwatchProcess(path, tmp_path / "lockwatch.log", port, env=env)
    process.start()
    try:
        assert process.metric("lockwatch_shard_info", shard="1", shards="2") == 1
        groups = requests.get(f"{process.base}/api/v1/sd", timeout=5).json()
        mine = {a for a in addresses if owner(a, 2) == 1}
        assert {g["labels"]["postgres_instance"] for g in groups} == mine
        assert process.metric("lockwatch_shard_targets") == len(mine)
        assert MONITOR_PASSWORD not in json.dumps(groups)
    finally:
        assert process.stop() == 0, process.log(whole=True)


def pod(daemon: Daemon, replica: str, ordinal: int) -> dict[str, Any]:
    """A file_sd entry that looks to Prometheus as a fleet pod would under kubernetes_sd."""
    return {
        "targets": [base(daemon).removeprefix("http://")],
        "labels": {
            "__meta_kubernetes_pod_label_app_kubernetes_io_component": "fleet",
            "__meta_kubernetes_pod_container_port_name": "metrics",
            "__meta_kubernetes_pod_label_lockwatch_dev_replica": replica,
            "__meta_kubernetes_pod_name": f"lockwatch-{replica}-{ordinal}",
            "__meta_kubernetes_namespace": "monitoring",
        },
    }


def test_prometheus_sees_two_replicas_differ_only_in_replica_and_probes_each_target(
    tmp_path: Path, pg: PgDatabase
) -> None:
    """The shipped scrape config (its kubernetes_sd_configs swapped for a
    file_sd list of the pods) in a real Prometheus, and a probe job on
    /api/v1/sd."""
    addresses = [f"{host}:{pg.server.port}" for host in ALIASES[:2]]
    sd_file = tmp_path / "fleet.json"
    write_sd(sd_file, [{"targets": addresses}])
    names = {address.replace(":", "_") for address in addresses}
    path = config(tmp_path, f"  - {{name: fleet, file: {sd_file}, auth_module: monitor}}")
    with (
        daemon_of(path, tmp_path / "state-a") as replica_a,
        daemon_of(path, tmp_path / "state-b") as replica_b,
    ):
        scrape = yaml.safe_load(PROMETHEUS_CONFIG.read_text(encoding="utf-8"))
        (job,) = scrape["scrape_configs"]
        del job["kubernetes_sd_configs"], scrape["rule_files"]
        pods = tmp_path / "pods.json"
        pods.write_text(json.dumps([pod(replica_a, "a", 0), pod(replica_b, "b", 0)]))
        job["file_sd_configs"] = [{"files": [str(pods)]}]
        probe = {
            "job_name": "probe",
            "http_sd_configs": [{"url": f"{base(replica_a)}/api/v1/sd", "refresh_interval": "1s"}],
            # as with blackbox_exporter: each probe is its own instance
            "relabel_configs": [{"source_labels": ["__param_target"], "target_label": "instance"}],
        }
        scrape["scrape_configs"].append(probe)
        scrape["global"] = {"scrape_interval": "1s", "scrape_timeout": "1s"}
        prometheus = Prometheus(tmp_path / "prometheus", scrape={})
        prometheus.config_path.write_text(yaml.safe_dump(scrape))
        with prometheus:

            def series(expr: str, count: int) -> list[dict[str, str]] | None:
                found = [r["metric"] for r in prometheus.query(expr)]
                return found if len(found) == count else None

            fleet = wait_until(
                lambda: series('lockwatch_up{job="lockwatch"} == 1', 4),
                timeout=60,
                message="both replicas scraped, each target up",
            )
            probes = wait_until(
                lambda: series('lockwatch_up{job="probe"} == 1', 2),
                timeout=60,
                message="one probe per target",
            )

    by_target: dict[str, list[dict[str, str]]] = {}
    for labels in fleet:
        by_target.setdefault(labels["target"], []).append(labels)
    assert set(by_target) == names
    for found in by_target.values():
        assert sorted(labels.pop("replica") for labels in found) == ["a", "b"]
        assert found[0] == found[1]  # nothing else differs: Thanos merges them
        assert found[0]["instance"] == "shard-0"
    # each probe returned its own target's series only, under its own label
    assert {(p["instance"], p["target"]) for p in probes} == {(n, n) for n in names}
    assert not any("exported_target" in p for p in probes)


def test_a_reload_that_brings_a_target_source_starts_reading_it(
    tmp_path: Path, pg: PgDatabase
) -> None:
    (tmp_path / "monitor-password").write_text(MONITOR_PASSWORD)
    path = tmp_path / "lockwatch.yml"
    static = f"targets: [{{name: own, dsn: '{pg.monitor_dsn}'}}]\n"
    path.write_text(static)
    sd_file = tmp_path / "fleet.json"
    write_sd(sd_file, [{"targets": [f"127.0.0.1:{pg.server.port}"], "labels": {"name": "found"}}])
    with daemon_of(path, tmp_path / "state") as daemon:
        assert watched(daemon) == {"own"}
        config(tmp_path, f"  - {{name: fleet, file: {sd_file}, auth_module: monitor}}")
        path.write_text(path.read_text(encoding="utf-8") + static)
        daemon.request_reload()  # as SIGHUP does: the main loop reloads

        wait_until(lambda: watched(daemon) == {"own", "found"} or None, message="found")
        wait_until(lambda: metric(daemon, "lockwatch_up", target="found") == 1, message="up")

"""The ``type: alertmanager`` channel against real Alertmanagers (Debian's
prometheus-alertmanager): two ``lockwatch run`` replicas with the same config
push the same incident to both nodes of an Alertmanager cluster, and the
receiver behind the cluster hears of it once when it fires and once when it
resolves, though one replica is killed mid-incident. The incident ids of the two replicas differ; the alert's labels do not."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.fixtures.postgres import PgDatabase, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config
from tests.fixtures.prometheus import PEER_TIMEOUT, Alertmanager, alertmanager_cluster
from tests.fixtures.standins import ChatStandin, Received

pytestmark = [
    pytest.mark.pg,
    pytest.mark.slow,
    pytest.mark.parametrize("pg_server", ["pg18"], indirect=True),
]

LOCKS = "{max_hold: 1s, orphan_after: 1h}"
GROUP_INTERVAL = 3.0  # well above the cluster's PEER_TIMEOUT
EXTERNAL_URL = "http://lockwatch.example"


def alertmanager_config(standin: ChatStandin) -> dict[str, Any]:
    """One group per incident root, sent to the stand-in's webhook, resolutions too."""
    return {
        "route": {
            "receiver": "hook",
            "group_by": ["target", "fingerprint"],
            "group_wait": "1s",
            "group_interval": f"{GROUP_INTERVAL:g}s",
            "repeat_interval": "1h",
        },
        "receivers": [
            {
                "name": "hook",
                "webhook_configs": [{"url": standin.webhook_url, "send_resolved": True}],
            }
        ],
    }


def replica(
    tmp_path: Path, name: str, pg: PgDatabase, alertmanagers: list[Alertmanager]
) -> LockwatchProcess:
    """A lockwatch of its own (port, state dir) with the channel every replica has."""
    directory = tmp_path / name
    directory.mkdir()
    port = free_port()
    config = write_config(directory, port, {"main": pg.monitor_dsn}, locks=LOCKS)
    urls = ", ".join(am.url for am in alertmanagers)
    with config.open("a") as extra:
        extra.write(
            f"""notify:
  connect_timeout: 1s
  read_timeout: 1s
  channels:
    - name: am
      type: alertmanager
      urls: [{urls}]
      labels: {{team: db}}
      external_url: {EXTERNAL_URL}/
"""
        )
    return LockwatchProcess(config, directory / "lockwatch.log", port)


@pytest.fixture
def standin() -> Iterator[ChatStandin]:
    with ChatStandin() as server:
        yield server


def notifications(standin: ChatStandin, status: str) -> list[Received]:
    return [r for r in standin.delivered("webhook") if r.body.get("status") == status]


def sent_by(alertmanagers: list[Alertmanager]) -> float:
    """Webhook notifications the cluster's nodes sent, together."""
    return sum(
        am.metric("alertmanager_notifications_total", integration="webhook") for am in alertmanagers
    )


def open_incidents(lockwatch: LockwatchProcess) -> list[dict[str, Any]]:
    answer = requests.get(f"{lockwatch.base}/api/v1/incidents?state=open", timeout=5)
    answer.raise_for_status()
    return list(answer.json()["incidents"])


def test_two_replicas_pushing_one_incident_to_a_cluster_make_one_firing_and_one_resolved_notification(
    tmp_path: Path, pg: PgDatabase, standin: ChatStandin
) -> None:
    with alertmanager_cluster(tmp_path / "am", alertmanager_config(standin)) as alertmanagers:
        replicas = [replica(tmp_path, name, pg, alertmanagers) for name in ("a", "b")]
        holder = pg.connect("report-1")
        try:
            for lockwatch in replicas:
                lockwatch.start()
            holder.execute("SELECT pg_advisory_lock(42)")
            pid = holder.info.backend_pid

            def open_on_both() -> list[dict[str, Any]] | None:
                found = [incident for lw in replicas for incident in open_incidents(lw)]
                return found if len(found) == 2 else None

            incidents = wait_until(open_on_both, message="the long hold an incident on both")
            ids = {i["id"] for i in incidents}
            (fingerprint,) = {i["fingerprint"] for i in incidents}  # the same root on both

            # Both nodes have the alert; each has decided at least twice whether to
            # notify (its second decision comes after its first one's notification, if
            # any, went out), and every notification they sent has arrived.
            def firing_settled() -> bool:
                return (
                    all(am.alerts() for am in alertmanagers)
                    and all(
                        am.metric("alertmanager_nflog_queries_total") >= 2 for am in alertmanagers
                    )
                    and len(standin.delivered("webhook")) == sent_by(alertmanagers) > 0
                )

            wait_until(firing_settled, timeout=30, message="the cluster's firing notification")
            (firing,) = notifications(standin, "firing")
            (alert,) = firing.body["alerts"]
            assert alert["labels"] == {
                "alertname": "LockwatchIncident",
                "target": "main",
                "fingerprint": fingerprint,
                "root": "session",
                "severity": "warning",
                "pid": str(pid),
                "team": "db",
            }
            annotations = alert["annotations"]
            assert annotations["incident"] in ids
            assert annotations["kind"] == "lock_held_too_long"
            assert annotations["application"] == "report-1"
            assert f"pid {pid}" in annotations["summary"]
            assert f"root: pid {pid} · report-1" in annotations["description"]
            assert "pg_terminate_backend" in annotations["sql"]
            assert annotations["runbook_url"].endswith("#lockwatchlockheldtoolong")
            assert alert["generatorURL"] == f"{EXTERNAL_URL}/#incident-{annotations['incident']}"
            for lockwatch in replicas:
                for am in alertmanagers:
                    where = am.address
                    pushes = lockwatch.metric(
                        "lockwatch_alertmanager_pushes_total", channel="am", alertmanager=where
                    )
                    assert pushes is not None and pushes >= 1, (lockwatch.base, where)

            for lockwatch in replicas:
                (found,) = open_incidents(lockwatch)
                told = [e["detail"] for e in found["timeline"] if e["event"] == "notified"]
                assert told == ["am"], found["timeline"]  # when an Alertmanager first took it
            # One replica dies mid-incident: its last push said "firing until four
            # resend intervals from then"; the survivor's resolution must end it.
            killed, survivor = replicas
            killed.kill()
            holder.execute("SELECT pg_advisory_unlock(42)")

            # The survivor resolved it and told both nodes (nothing pending); neither
            # node has it firing any more.
            def resolved_everywhere() -> bool:
                return (
                    not open_incidents(survivor)
                    and survivor.metric("lockwatch_notifications_pending", channel="am") == 0
                    and not any(am.alerts() for am in alertmanagers)
                )

            wait_until(resolved_everywhere, message="the end told to both Alertmanagers")
            # A second resolved notification could only come from the node that waits
            # for its peer: it decides within a group interval and a peer timeout from
            # now (a margin of one more). Wait past that, and for every notification
            # sent to have arrived.
            quiet_after = time.monotonic() + GROUP_INTERVAL + 2 * PEER_TIMEOUT

            def resolved_settled() -> bool:
                return (
                    time.monotonic() > quiet_after
                    and bool(notifications(standin, "resolved"))
                    and len(standin.delivered("webhook")) == sent_by(alertmanagers)
                )

            wait_until(resolved_settled, timeout=30, message="the cluster's resolved notification")
            assert len(notifications(standin, "firing")) == 1
            (resolved,) = notifications(standin, "resolved")
            (ended,) = resolved.body["alerts"]
            assert ended["labels"] == alert["labels"] and ended["status"] == "resolved"
        finally:
            holder.close()
            for lockwatch in replicas:
                if lockwatch.proc is not None:
                    assert lockwatch.stop() in (0, -signal.SIGKILL), lockwatch.log(whole=True)

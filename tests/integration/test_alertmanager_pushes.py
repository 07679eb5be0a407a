"""The alertmanager channel's worker over real HTTP: an Alertmanager that
hangs delays none of the others and gets the alerts once it answers again;
an incident fires once its `for` passed, poll or no poll;
``notify-test`` pushes a test alert to each and says what each answered."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lockwatch.cli import main
from lockwatch.model.incidents import IncidentChanges
from lockwatch.notify.alertmanager import AlertmanagerWorker
from lockwatch.notify.am_alerts import TEST_ALERT_NAME
from lockwatch.notify.inbox import Backoff
from lockwatch.notify.service import AlertNotifier
from lockwatch.settings.notify import AlertmanagerChannel, NotifySettings, Route
from lockwatch.state.deliveries import Deliveries
from lockwatch.util.clock import utc_now
from tests.fixtures.incident_values import incident
from tests.fixtures.notify import finding
from tests.fixtures.postgres import wait_until
from tests.fixtures.prometheus import Alertmanager, binary
from tests.fixtures.snapshots import NOW, TARGET
from tests.fixtures.standins import ChatStandin

FAST = Backoff(first=0.05, cap=0.2)
ROUTE = {"route": {"receiver": "none"}, "receivers": [{"name": "none"}]}


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[Alertmanager]:
    binary("prometheus-alertmanager")
    with Alertmanager(tmp_path / "am", ROUTE) as server:
        yield server


def alerts_named(alertmanager: Alertmanager, name: str) -> list[dict[str, Any]]:
    return [a for a in alertmanager.alerts() if a["labels"].get("alertname") == name]


def test_an_alertmanager_that_hangs_delays_none_of_the_others_and_catches_up_once_it_answers(
    alertmanager: Alertmanager, standin: ChatStandin
) -> None:
    standin.hang()
    channel = AlertmanagerChannel("am", (standin.base, alertmanager.url), resend_interval=1.0)
    settings = NotifySettings(channels=(channel,), connect_timeout=0.5, read_timeout=0.5)
    deliveries = Deliveries()
    notifier = AlertNotifier(
        settings,
        None,
        clock=utc_now,
        backoff=FAST,
        deliveries=deliveries,
    )
    (worker,) = notifier.alertmanagers
    hung, answering = worker.peers
    notifier.start()
    try:
        found = incident()
        notifier(IncidentChanges(TARGET, active=(found,)))
        (alert,) = wait_until(
            lambda: alerts_named(alertmanager, "LockwatchIncident"), message="the alert pushed"
        )
        assert alert["labels"]["fingerprint"] == found.fingerprint
        assert alert["annotations"]["incident"] == found.id
        wait_until(lambda: answering.pushes_total >= 2, message="a resend meanwhile")
        told = [(d.target, d.incident, d.channel) for d in deliveries.of(found.id)]
        assert told == [(TARGET, found.id, "am")], "once, when the first took it"
        assert hung.pushes_total == 0
        wait_until(lambda: hung.errors_total >= 2, message="the hung pushes given up on")

        standin.recover()
        wait_until(lambda: hung.pushes_total >= 1, message="the recovered Alertmanager told")
        (pushed,) = standin.delivered("alertmanager")[0].body["_raw"]
        assert pushed["labels"] == alert["labels"]

        notifier(IncidentChanges(TARGET))
        wait_until(
            lambda: not alerts_named(alertmanager, "LockwatchIncident"),
            message="the alert's end pushed",
        )
        wait_until(lambda: worker.pending == 0, message="both told its end")
    finally:
        notifier.stop(5)


def test_an_incident_is_pushed_once_its_for_passed_without_waiting_for_the_next_poll(
    standin: ChatStandin,
) -> None:
    now = [NOW]
    channel = AlertmanagerChannel("am", (standin.base,))
    settings = NotifySettings(channels=(channel,), routes=(Route(("am",), for_duration=60.0),))
    worker = AlertmanagerWorker(channel, settings, clock=lambda: now[0], backoff=FAST)
    (peer,) = worker.peers
    worker.inbox.offer(TARGET, (incident([finding(lasted=30)]),))
    worker.step(peer)
    assert standin.requests("alertmanager") == []
    now[0] += timedelta(seconds=30)
    worker.step(peer)
    (pushed,) = standin.delivered("alertmanager")[0].body["_raw"]
    assert pushed["labels"]["alertname"] == "LockwatchIncident"


def test_notify_test_pushes_a_test_alert_to_each_alertmanager_and_says_what_each_answered(
    alertmanager: Alertmanager, tmp_path: Path
) -> None:
    config = tmp_path / "lockwatch.yml"
    config.write_text(
        f"""targets: [{{name: main, dsn: host=db}}]
notify:
  connect_timeout: 1s
  channels:
    - {{name: am, type: alertmanager, urls: ["{alertmanager.url}", "http://127.0.0.1:9"]}}
"""
    )
    outcome = CliRunner().invoke(main, ["notify-test", "-c", str(config)])
    assert outcome.exit_code == 1, outcome.output
    assert outcome.output == (
        f"am (alertmanager): FAILED, {alertmanager.address}: HTTP 200; 127.0.0.1:9: cannot "
        "reach http://127.0.0.1:9: Connection refused (lockwatch would retry with backoff)\n"
    )
    (alert,) = alerts_named(alertmanager, TEST_ALERT_NAME)
    assert alert["labels"] == {"alertname": TEST_ALERT_NAME, "severity": "info", "channel": "am"}

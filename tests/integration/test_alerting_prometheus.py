"""Both alerting paths end to end during a real convoy (seed 002): Prometheus
scrapes ``lockwatch run`` and fires the bundled rule, Alertmanager routes it
with the shipped example config to Telegram and Slack stand-ins; lockwatch's own
notifier tells the same story to the same stand-ins. The convoy is one incident:
each message arrives once, naming the holder with its numbers, and so does each
resolution. The workers'
application name is hostile: markup for Telegram, a mention for Slack."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from lockwatch.demo.scenarios import ConvoyIncident
from tests.fixtures.paths import ROOT
from tests.fixtures.postgres import PgDatabase, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config
from tests.fixtures.prometheus import Alertmanager, Prometheus, binary
from tests.fixtures.standins import ChatStandin, Received, add_telegram

pytestmark = [
    pytest.mark.pg,
    pytest.mark.slow,
    pytest.mark.parametrize("pg_server", ["pg18"], indirect=True),
]

RULES = ROOT / "alerts" / "lockwatch.rules.yml"
EXAMPLE = ROOT / "docs" / "alertmanager.example.yml"
TEMPLATE = ROOT / "docs" / "alertmanager.lockwatch.tmpl"
LOCKS = "{max_hold: 1h, orphan_after: 1h, convoy_waiters: 2, convoy_wait: 1s}"
AM_CHAT, LW_CHAT = "-1001111111111", "-1002222222222"
# PostgreSQL keeps application names to 63 printable ASCII characters.
HOSTILE = "<i>w</i><!channel>&amp"
HOLDER_APP = f"{HOSTILE}-1"


def alertmanager_config(tmp_path: Path, standin: ChatStandin) -> dict[str, Any]:
    """The shipped example, pointed at the stand-ins and with second-long waits."""
    config: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    config["templates"] = [str(TEMPLATE)]
    config["route"].update(group_wait="1s", group_interval="1s")
    receivers = {receiver["name"]: receiver for receiver in config["receivers"]}
    (telegram,) = receivers["telegram"]["telegram_configs"]
    telegram.update(api_url=standin.telegram_api, bot_token=standin.token, chat_id=int(AM_CHAT))
    slack_url = tmp_path / "slack-webhook-url"
    slack_url.write_text(standin.slack_url)
    (slack,) = receivers["slack"]["slack_configs"]
    slack["api_url_file"] = str(slack_url)
    return config


def lockwatch_config(tmp_path: Path, port: int, pg: PgDatabase, standin: ChatStandin) -> Path:
    config = write_config(tmp_path, port, {"main": pg.monitor_dsn}, locks=LOCKS)
    (tmp_path / "tg-token").write_text(standin.token)
    (tmp_path / "slack-url").write_text(standin.slack_url)
    with config.open("a") as extra:
        extra.write(
            f"""notify:
  channels:
    - {{name: ops, type: telegram, bot_token_file: {tmp_path / "tg-token"}, chat_id: "{LW_CHAT}",
       api_url: "{standin.telegram_api}"}}
    - {{name: team, type: slack, webhook_url_file: {tmp_path / "slack-url"}}}
"""
        )
    return config


@pytest.fixture
def standin() -> Iterator[ChatStandin]:
    with ChatStandin(chats=(AM_CHAT, LW_CHAT)) as server:
        yield server


def from_alertmanager(standin: ChatStandin) -> tuple[list[Received], list[Received]]:
    telegram = [r for r in standin.delivered("telegram") if str(r.body["chat_id"]) == AM_CHAT]
    slack = [r for r in standin.delivered("slack") if "attachments" in r.body]
    return telegram, slack


def from_lockwatch(standin: ChatStandin) -> tuple[list[Received], list[Received]]:
    telegram = [r for r in standin.delivered("telegram") if str(r.body["chat_id"]) == LW_CHAT]
    slack = [r for r in standin.delivered("slack") if "attachments" not in r.body]
    return telegram, slack


def test_a_convoy_pages_through_prometheus_and_alertmanager_and_through_lockwatch_alike(
    tmp_path: Path, pg: PgDatabase, standin: ChatStandin
) -> None:
    binary("prometheus")
    binary("prometheus-alertmanager")
    port = free_port()
    lockwatch = LockwatchProcess(
        lockwatch_config(tmp_path, port, pg, standin), tmp_path / "lockwatch.log", port
    )
    incident = ConvoyIncident(pg.admin_dsn, waiters=3, app_prefix=HOSTILE)
    with (
        Alertmanager(tmp_path / "am", alertmanager_config(tmp_path, standin)) as alertmanager,
        Prometheus(
            tmp_path / "prom",
            scrape={"lockwatch": [f"127.0.0.1:{port}"]},
            rule_files=[RULES],
            alertmanager=alertmanager.address,
        ) as prometheus,
    ):
        lockwatch.start()
        try:
            incident.start()
            assert incident.holder is not None  # set by incident.start()
            pid = incident.holder.pid
            alert = prometheus.wait_for_alert("LockwatchLockConvoy")
            labels = alert["labels"]
            assert (labels["pid"], labels["application"]) == (str(pid), HOLDER_APP)
            assert labels["severity"] == "critical" and labels["root"] == "session"
            holder = f"by pid {pid} · {HOLDER_APP} · 127.0.0.1"  # the holder label
            assert f"lock 42 in {pg.database} {holder}" in alert["annotations"]["summary"]
            assert "session(s) waiting" in alert["annotations"]["description"]
            assert labels["incident"] in alert["annotations"]["description"]

            wait_until(
                lambda: all(from_alertmanager(standin)) and all(from_lockwatch(standin)),
                timeout=60,
                message=f"both paths deliver the convoy\n{alertmanager.log()}",
            )
            am_telegram, am_slack = from_alertmanager(standin)
            lw_telegram, lw_slack = from_lockwatch(standin)
            # Telegram shows the name as text (the stand-in refuses what Telegram
            # would not parse); Slack gets it escaped, never as a mention.
            for message in (*am_telegram, *am_slack):
                assert "LockwatchLockConvoy" in message.text
                assert f"incident {labels['incident']}" in message.text
            assert holder in am_telegram[0].text
            for message in (*lw_telegram, *lw_slack):
                assert f"critical · main · incident {labels['incident']}" in message.text
                assert "next step: " in message.text
            assert lw_telegram[0].text.startswith("🔥 OPENED: ")
            assert f"root: pid {pid} · {HOLDER_APP} · 127.0.0.1" in lw_telegram[0].text
            escaped = "&lt;i&gt;w&lt;/i&gt;&lt;!channel&gt;&amp;amp-1"
            assert escaped in am_slack[0].text and escaped in lw_slack[0].text
            assert "<!channel>" not in am_slack[0].text + lw_slack[0].text

            incident.stop()

            def resolved() -> bool:
                messages = [*from_alertmanager(standin), *from_lockwatch(standin)]
                return all(len(m) == 2 for m in messages)

            wait_until(resolved, timeout=60, message="both paths deliver the resolution")
            am_telegram, am_slack = from_alertmanager(standin)
            assert "FIRING" in am_telegram[0].text and "RESOLVED" in am_telegram[1].text
            assert "FIRING" in am_slack[0].text and "RESOLVED" in am_slack[1].text
            lw_telegram, lw_slack = from_lockwatch(standin)
            assert lw_telegram[1].text.startswith("✅ RESOLVED: ")
            assert "RESOLVED: " in lw_slack[1].text
        finally:
            incident.stop()
            assert lockwatch.stop() in (0, -signal.SIGKILL), lockwatch.log(whole=True)


def test_one_session_holding_4001_locks_is_one_message_and_at_most_five_prometheus_alerts(
    tmp_path: Path, pg: PgDatabase, standin: ChatStandin
) -> None:
    binary("prometheus")
    port = free_port()
    config = write_config(
        tmp_path, port, {"main": pg.monitor_dsn}, locks="{max_hold: 1s, orphan_after: 1s}"
    )
    add_telegram(config, standin)
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    with (
        psycopg.connect(pg.admin_dsn, autocommit=True) as session,
        Prometheus(
            tmp_path / "prom", scrape={"lockwatch": [f"127.0.0.1:{port}"]}, rule_files=[RULES]
        ) as prometheus,
    ):
        session.execute("SET application_name = 'psql'")
        session.execute("SELECT count(pg_advisory_lock(k)) FROM generate_series(1, 4001) AS k")
        lockwatch.start()
        try:
            wait_until(
                lambda: lockwatch.finding("lock_orphaned", "main"), message="the orphaned locks"
            )
            every = lockwatch.findings()
            findings = len(every)
            # The session's 4,001 locks are told about it, each counted once.
            orphaned = sum(
                f["evidence"]["held_keys"] for f in every if f["kind"] == "lock_orphaned"
            )
            # Prometheus has scraped every finding, and evaluated its rules since.
            wait_until(
                lambda: (
                    prometheus.query("sum(lockwatch_findings)")
                    and float(prometheus.query("sum(lockwatch_findings)")[0]["value"][1])
                    >= findings
                ),
                timeout=60,
                message="Prometheus sees all the findings",
            )
            before = evaluations(prometheus)
            wait_until(
                lambda: all(
                    stamp != before.get(name) for name, stamp in evaluations(prometheus).items()
                ),
                timeout=60,
                message="a rule evaluation after the scrape",
            )
            alerts = [
                a for a in prometheus.alerts() if a["labels"]["alertname"].startswith("Lockwatch")
            ]
            assert orphaned == 4001, f"{orphaned} locks told: not the case this test is about"
            assert 1 <= len(alerts) <= 5, [a["labels"]["alertname"] for a in alerts]
            print(f"4,001 locks: {findings} findings, {len(alerts)} Prometheus alert(s)")

            wait_until(lambda: standin.delivered("telegram"), message="lockwatch's own message")
            lockwatch.wait_polls(4)  # a few more polls of the same session
            (message,) = standin.delivered("telegram")
            assert "4001 locks held" in message.text
        finally:
            assert lockwatch.stop() in (0, -signal.SIGKILL), lockwatch.log(whole=True)


def evaluations(prometheus: Prometheus) -> dict[str, str]:
    """When Prometheus last evaluated each rule group, as it says it."""
    groups = prometheus.get("/api/v1/rules")["data"]["groups"]
    return {group["name"]: str(group.get("lastEvaluation")) for group in groups}

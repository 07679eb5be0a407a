"""The ``notify:`` section: channels, secrets, routes, and every problem at once."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path

import pytest

from lockwatch.config.load import ConfigError, load_settings
from lockwatch.model.findings import FindingKind, Severity
from lockwatch.settings.notify import (
    TELEGRAM_API,
    AlertmanagerChannel,
    NotifySettings,
    Route,
    SlackChannel,
    TelegramChannel,
    WebhookChannel,
)

TOKEN = "123456:AAE-secret-bot-token"
SLACK = "https://hooks.slack.com/services/T000/B000/secret-slack-path"
HOOK = "https://receiver.example/alerts?key=secret-hook-key"
ENV = {"TG_TOKEN": TOKEN, "SLACK_URL": SLACK, "HOOK_URL": HOOK}


def load(tmp_path: Path, notify: str, environ: Mapping[str, str] = ENV) -> NotifySettings:
    return load_settings(_write(tmp_path, notify), environ).notify


def problems(tmp_path: Path, notify: str, environ: Mapping[str, str] = ENV) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_settings(_write(tmp_path, notify), environ)
    text = str(caught.value)
    for secret in (TOKEN, SLACK, HOOK, "34/secret", "example/secret"):
        assert secret not in text
    return text.splitlines()


def _write(tmp_path: Path, notify: str) -> Path:
    path = tmp_path / "lockwatch.yml"
    body = textwrap.indent(textwrap.dedent(notify).strip("\n"), "  ")
    path.write_text(
        "targets:\n  - name: main\n    dsn: host=db\n  - name: billing-eu\n    dsn: host=db\n"
        f"notify:\n{body}\n"
    )
    return path


def test_channels_routes_and_timings_load_with_secrets_from_files_and_the_environment(
    tmp_path: Path,
) -> None:
    (tmp_path / "telegram-token").write_text(TOKEN + "\n")
    notify = load(
        tmp_path,
        """
        for: 30s
        repeat_interval: 2h
        connect_timeout: 1s
        read_timeout: 4s
        channels:
          - {name: ops, type: telegram, bot_token_file: telegram-token, chat_id: -1001234567890}
          - {name: team, type: slack, webhook_url: "${SLACK_URL}"}
          - name: receiver
            type: webhook
            url: ${HOOK_URL}
          - {name: self-hosted, type: telegram, bot_token: "${TG_TOKEN}", chat_id: "@ops",
             api_url: "http://127.0.0.1:8081/"}
        routes:
          - channels: [ops]
            severities: [critical]
            for: 0s
          - channels: [team, receiver]
            kinds: [lock_convoy, queue_stalled]
            targets: ["billing-*", main]
            repeat_interval: 0
        """,
    )
    assert notify == NotifySettings(
        channels=(
            TelegramChannel("ops", TOKEN, "-1001234567890", TELEGRAM_API),
            SlackChannel("team", SLACK),
            WebhookChannel("receiver", HOOK),
            TelegramChannel("self-hosted", TOKEN, "@ops", "http://127.0.0.1:8081"),
        ),
        routes=(
            Route(("ops",), severities=frozenset({Severity.CRITICAL}), for_duration=0.0),
            Route(
                ("team", "receiver"),
                kinds=frozenset({FindingKind.LOCK_CONVOY, FindingKind.QUEUE_STALLED}),
                targets=("billing-*", "main"),
                repeat_interval=0.0,
            ),
        ),
        for_duration=30.0,
        repeat_interval=7200.0,
        connect_timeout=1.0,
        read_timeout=4.0,
    )
    assert TOKEN not in repr(notify) and SLACK not in repr(notify) and HOOK not in repr(notify)


def test_without_a_notify_section_nothing_is_sent(tmp_path: Path) -> None:
    path = tmp_path / "lockwatch.yml"
    path.write_text("targets:\n  - {name: main, dsn: host=db}\n")
    assert load_settings(path, {}).notify == NotifySettings()


def test_a_secret_written_in_the_file_itself_is_refused_without_being_echoed(
    tmp_path: Path,
) -> None:
    assert problems(
        tmp_path,
        f"""
        channels:
          - {{name: ops, type: telegram, bot_token: "{TOKEN}", chat_id: 1}}
          - {{name: team, type: slack, webhook_url: "{SLACK}"}}
        """,
    ) == [
        f"{tmp_path}/lockwatch.yml:8: notify.channels[0].bot_token: keep the secret out of the "
        "config file: use bot_token_file, or take it from the environment with ${VAR}",
        f"{tmp_path}/lockwatch.yml:9: notify.channels[1].webhook_url: keep the secret out of the "
        "config file: use webhook_url_file, or take it from the environment with ${VAR}",
    ]


def test_every_problem_in_the_section_is_reported_at_once_with_its_path_and_line(
    tmp_path: Path,
) -> None:
    (tmp_path / "empty").write_text("\n")
    found = problems(
        tmp_path,
        """
        for: soon
        colour: red
        channels:
          - {name: ops, type: telegarm}
          - {name: ops, type: slack, webhook_url_file: empty}
          - {name: hook, type: webhook, url: "${HOOK_URL}", url_file: x, chat_id: 3}
          - {name: tg, type: telegram, bot_token: "${BAD_TOKEN}"}
          - {name: plain-http, type: webhook, url: "${NOT_A_URL}"}
        routes:
          - channels: [opps]
            kinds: [lock_convy]
            severities: [urgent]
            targets: [mian, "billing-*"]
          - kinds: [lock_convoy]
        """,
        {**ENV, "BAD_TOKEN": "12 34/secret", "NOT_A_URL": "receiver.example/secret"},
    )
    where = f"{tmp_path}/lockwatch.yml"
    assert found == [
        f"{where}:7: notify.for: not a duration: 'soon' (use 500ms, 5s, 2m, 1h)",
        f"{where}:8: notify.colour: unknown key (expected one of: channels, connect_timeout, "
        "deadline, edit_interval, for, group, lease, read_timeout, repeat_interval, routes, unanswered_retries)",
        f"{where}:10: notify.channels[0].type: unknown channel type 'telegarm' "
        "(did you mean 'telegram'?)",
        f"{where}:11: notify.channels[1].name: 'ops' is already used at notify.channels[0]",
        f"{where}:11: notify.channels[1].webhook_url_file: file is empty: {tmp_path}/empty",
        f"{where}:12: notify.channels[2].chat_id: not a key of a webhook channel "
        "(those are: name, type, url, url_file)",
        f"{where}:12: notify.channels[2]: set either 'url' or 'url_file', not both",
        f"{where}:13: notify.channels[3].bot_token: not a bot token (like 123456:ABC-DEF...) "
        "(the value is not shown: it may hold a secret)",
        f"{where}:13: notify.channels[3]: missing required key 'chat_id'",
        f"{where}:14: notify.channels[4].url: not an http:// or https:// URL "
        "(the value is not shown: it may hold a secret)",
        f"{where}:16: notify.routes[0].channels[0]: unknown channel 'opps' (did you mean 'ops'?)",
        f"{where}:16: notify.routes[0].channels: needs at least one channel",
        f"{where}:17: notify.routes[0].kinds[0]: unknown finding kind 'lock_convy' "
        "(did you mean 'lock_convoy'?)",
        f"{where}:18: notify.routes[0].severities[0]: unknown severity 'urgent' "
        "(expected one of: critical, info, warning)",
        f"{where}:19: notify.routes[0].targets[0]: no target is named 'mian' "
        "(did you mean 'main'?)",
        f"{where}:20: notify.routes[1]: missing required key 'channels'",
    ]


def test_an_alertmanager_channel_loads_its_urls_labels_and_credentials_from_a_file(
    tmp_path: Path,
) -> None:
    (tmp_path / "am-password").write_text("am-s3cret\n")
    notify = load(
        tmp_path,
        """
        channels:
          - name: am
            type: alertmanager
            urls: ["http://am-0.am:9093/", https://am-1.am:9093/prefix]
            resend_interval: 30s
            labels: {team: db, env: prod}
            external_url: https://lockwatch.example/
            username: lockwatch
            password_file: am-password
          - {name: am-token, type: alertmanager, urls: [http://am:9093], bearer_token: "${TG_TOKEN}"}
        """,
    )
    assert notify.channels == (
        AlertmanagerChannel(
            "am",
            ("http://am-0.am:9093", "https://am-1.am:9093/prefix"),
            resend_interval=30.0,
            labels={"team": "db", "env": "prod"},
            external_url="https://lockwatch.example/",
            username="lockwatch",
            password="am-s3cret",
        ),
        AlertmanagerChannel("am-token", ("http://am:9093",), bearer_token=TOKEN),
    )
    assert "am-s3cret" not in repr(notify) and TOKEN not in repr(notify)
    assert set(notify.secrets) >= {"am-s3cret", TOKEN}


def test_an_alertmanager_channels_problems_are_each_reported_with_their_line(
    tmp_path: Path,
) -> None:
    (tmp_path / "pw").write_text("am-s3cret\n")
    found = problems(
        tmp_path,
        """
        channels:
          - name: am
            type: alertmanager
            urls: ["http://lw:am-s3cret@am:9093", am:9093, "http://am:9093/?x=1"]
            labels: {team-name: db}
            resend_interval: 0s
          - {name: twice, type: alertmanager, urls: [http://am:9093, http://am:9093/]}
          - {name: none, type: alertmanager, urls: []}
          - {name: half, type: alertmanager, urls: [http://am:9093], username: lw}
          - {name: both, type: alertmanager, urls: [http://am:9093], username: lw,
             password_file: pw, bearer_token: "${TG_TOKEN}"}
          - {name: chat, type: alertmanager, urls: [http://am:9093], chat_id: 1}
        """,
    )
    where = f"{tmp_path}/lockwatch.yml"
    assert found == [
        f"{where}:10: notify.channels[0].urls[0]: holds a user or password: use username "
        "with password_file, or bearer_token_file",
        f"{where}:10: notify.channels[0].urls[1]: not an http:// or https:// URL: 'am:9093'",
        f"{where}:10: notify.channels[0].urls[2]: has a query or fragment: give the "
        "Alertmanager's base URL (its --web.external-url)",
        f"{where}:11: notify.channels[0].labels: 'team-name' is not a label name (letters, "
        "digits and '_', not starting with a digit)",
        f"{where}:12: notify.channels[0].resend_interval: must be at least 1s",
        f"{where}:13: notify.channels[1].urls[1]: 'http://am:9093' is already listed at "
        "notify.channels[1].urls[0]",
        f"{where}:14: notify.channels[2].urls: needs at least one Alertmanager URL",
        f"{where}:15: notify.channels[3].password: basic auth needs both username and "
        "password_file",
        f"{where}:17: notify.channels[4].bearer_token: use basic auth or a bearer token, not both",
        f"{where}:18: notify.channels[5].chat_id: not a key of an alertmanager channel (those "
        "are: name, type, urls, resend_interval, labels, external_url, username, password, "
        "password_file, bearer_token, bearer_token_file)",
    ]
    assert not any("am-s3cret" in line for line in found)

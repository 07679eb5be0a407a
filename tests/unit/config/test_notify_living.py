"""Living channels in the ``notify:`` section: Slack's Web API with a bot
token kept out of the file, Telegram's ``living``, the edit interval, a
route's ``times``/``within`` and ``incidents.reopen_grace``."""

from __future__ import annotations

from pathlib import Path

from lockwatch.config.load import load_settings
from lockwatch.settings.notify import SLACK_API, Route, SlackApiChannel, TelegramChannel
from tests.unit.config.test_notify import ENV, TOKEN, _write, load, problems

SLACK_TOKEN = "xoxb-1111-2222-secret-slack-bot-token"


def test_a_slack_web_api_channel_and_a_living_telegram_load(tmp_path: Path) -> None:
    (tmp_path / "slack-token").write_text(SLACK_TOKEN + "\n")
    notify = load(
        tmp_path,
        f"""
        edit_interval: 30s
        channels:
          - {{name: ops, type: telegram, bot_token: "${{TG_TOKEN}}", chat_id: 1, living: true}}
          - name: team
            type: slack_api
            bot_token_file: {tmp_path / "slack-token"}
            channel: C0123ABCD
        routes:
          - {{channels: [team], times: 3, within: 1h}}
        """,
    )
    telegram, slack = notify.channels
    assert isinstance(telegram, TelegramChannel) and telegram.living
    assert slack == SlackApiChannel("team", SLACK_TOKEN, "C0123ABCD", SLACK_API)
    assert SLACK_TOKEN not in repr(slack) and notify.secrets == (TOKEN, SLACK_TOKEN)
    assert notify.living("ops") and notify.living("team")
    assert notify.edit_interval == 30
    assert notify.routes == (Route(("team",), times=3, within=3600),)


def test_a_slack_web_api_channel_s_problems_are_each_reported_with_their_line(
    tmp_path: Path,
) -> None:
    found = problems(
        tmp_path,
        f"""
        channels:
          - {{name: team, type: slack_api, bot_token: "{SLACK_TOKEN}", channel: "#ops"}}
        routes:
          - {{channels: [team], times: 3}}
        """,
    )
    assert SLACK_TOKEN not in "\n".join(found)
    where = f"{tmp_path}/lockwatch.yml"
    assert found == [
        f"{where}:8: notify.channels[0].bot_token: keep the secret out of the config file: "
        "use bot_token_file, or take it from the environment with ${VAR}",
        f"{where}:8: notify.channels[0].channel: not a Slack channel id (like C0123ABCD): "
        "chat.update needs the id, not '#ops'",
        f"{where}:10: notify.routes[0].times: times needs within: the window they must fall in",
    ]


def test_the_reopen_grace_defaults_to_ten_minutes_and_can_be_turned_off(tmp_path: Path) -> None:
    path = _write(tmp_path, "channels: []")
    assert load_settings(path, ENV).incidents.reopen_grace == 600
    path.write_text(path.read_text() + "incidents:\n  reopen_grace: 0s\n")
    assert load_settings(path, ENV).incidents.reopen_grace == 0

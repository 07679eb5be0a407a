"""Slack's Web API with a bot token, for living messages (``notify/living.py``):
``chat.postMessage`` once, ``chat.update`` as the incident goes on, replies in
its thread (``thread_ts``) when it gets worse, comes back or resolves.

The Web API answers HTTP 200 with ``{"ok": false, "error": ...}`` for most
failures and 429 with ``Retry-After`` when rate limited. The token travels in
the ``Authorization`` header only, and no error message quotes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from lockwatch.notify.message import Message
from lockwatch.notify.render import SLACK_LIMIT, Line, document, fit, reply_lines, slack_mrkdwn
from lockwatch.notify.transports import (
    EditingTransport,
    SlackTransport,
    TelegramTransport,
    Transport,
    WebhookTransport,
    transport_timeouts,
)
from lockwatch.settings.notify import (
    MessageChannel,
    NotifySettings,
    SlackApiChannel,
    SlackChannel,
    TelegramChannel,
)
from lockwatch.text import one_line, printable

if TYPE_CHECKING:
    import requests

# The message cannot be edited any more: it is posted anew.
_GONE = frozenset({"message_not_found", "cant_update_message", "edit_window_closed"})
# Slack's own trouble: sent again later.
_TRANSIENT = frozenset(
    {"internal_error", "fatal_error", "service_unavailable", "request_timeout", "ratelimited"}
)
_HINTS: Mapping[str, str] = {
    "invalid_auth": "check bot_token",
    "not_authed": "check bot_token",
    "token_revoked": "the bot token was revoked: install the app again",
    "account_inactive": "the bot token was revoked: install the app again",
    "channel_not_found": "check channel (its id, like C0123ABCD)",
    "not_in_channel": "invite the bot to the channel",
    "missing_scope": "the bot needs the chat:write scope",
}


class SlackApiTransport(EditingTransport):
    channel: SlackApiChannel

    _STATUS_HINTS: ClassVar[Mapping[int, str]] = {404: "check api_url"}

    def __init__(self, channel: SlackApiChannel, **kwargs: Any) -> None:
        super().__init__(channel, **kwargs)
        self.headers = {"Authorization": f"Bearer {channel.bot_token}"}

    @property
    def living(self) -> bool:
        return True

    def send(self, message: Message) -> str:
        return f"message {self._post(document(message))}"

    def open(self, message: Message) -> str:
        return self._post(document(message, living=True))

    def edit(self, ref: str, message: Message) -> None:
        self.call("chat.update", {"ts": ref, "text": _text(document(message, living=True))})

    def reply(self, ref: str, message: Message) -> None:
        self.call("chat.postMessage", {"thread_ts": ref, "text": _text(reply_lines(message))})

    def _post(self, lines: list[Line]) -> str:
        data = self.call(
            "chat.postMessage", {"text": _text(lines), "unfurl_links": False, "unfurl_media": False}
        )
        ts = data.get("ts")
        if not isinstance(ts, str) or not ts:
            raise self.fail("Slack's answer to chat.postMessage has no ts")
        return ts

    def call(self, method: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        """One Web API call in this channel; its answer, or TransportError."""
        answer = self.post(
            f"{self.channel.api_url}/{method}", {"channel": self.channel.channel, **fields}
        )
        if answer.status != 200:
            raise self.refused(answer, "Slack", answer.text or "no description", self._STATUS_HINTS)
        data = answer.json()
        if data.get("ok") is True:
            return data
        if "ok" not in data:
            raise self.fail(
                f"Slack's address answered HTTP 200 with a body that is not the Web API's "
                f"JSON (a proxy?): {answer.text or 'empty'}"
            )
        error = printable(one_line(str(data.get("error") or "no error given"), 80))
        said = f"Slack's {method} answered {error}"
        if error in _GONE:
            raise self.fail(said, gone=True)
        if error in _TRANSIENT:
            raise self.fail(said, retry_after=answer.retry_after)
        hint = _HINTS.get(error)
        raise self.fail(f"{said}{f'; {hint}' if hint else ''}", permanent=True)


def _text(lines: list[Line]) -> str:
    return slack_mrkdwn(fit(lines, SLACK_LIMIT))


def make_transport(
    channel: MessageChannel,
    settings: NotifySettings,
    *,
    external_url: str = "",
    session: requests.Session | None = None,
) -> Transport:
    timeouts = transport_timeouts(settings, session)
    if isinstance(channel, TelegramChannel):
        return TelegramTransport(channel, **timeouts)
    if isinstance(channel, SlackChannel):
        return SlackTransport(channel, **timeouts)
    if isinstance(channel, SlackApiChannel):
        return SlackApiTransport(channel, **timeouts)
    return WebhookTransport(channel, external_url=external_url, **timeouts)

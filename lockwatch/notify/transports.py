"""Telegram, Slack and webhook deliveries over HTTP.

Each call has a connect and a read timeout and a total deadline (a receiver
may trickle its answer in reads that each come in time), follows no redirect
and reads at most a small answer. Failures raise :class:`TransportError`: ``permanent``
when sending again cannot help (a bad token, an unknown chat, a removed
webhook), with ``retry_after`` when the receiver said when to come back.
No error message carries a token or a webhook URL.
"""

from __future__ import annotations

import abc
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

from lockwatch.notify.message import Message
from lockwatch.notify.render import (
    SLACK_LIMIT,
    TELEGRAM_LIMIT,
    Line,
    document,
    fit,
    reply_lines,
    slack_mrkdwn,
    telegram_html,
    webhook_payload,
)
from lockwatch.settings.notify import (
    Channel,
    NotifySettings,
    SlackChannel,
    TelegramChannel,
    WebhookChannel,
)
from lockwatch.text import one_line, printable
from lockwatch.util.deadline import within
from lockwatch.util.secrets import redact

if TYPE_CHECKING:
    import requests

MAX_ANSWER = 64 * 1024  # bytes of an answer read; receivers say little
_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\"\)\]]+)")


class TransportError(Exception):
    """``unanswered``: the request was sent whole and its answer timed out, so
    it may have been delivered; sending it again may tell it twice. ``gone``:
    the message to edit cannot be edited any more (deleted, too old)."""

    def __init__(
        self,
        message: str,
        *,
        permanent: bool = False,
        retry_after: float | None = None,
        unanswered: bool = False,
        gone: bool = False,
    ) -> None:
        super().__init__(message)
        self.permanent = permanent or gone
        self.retry_after = retry_after
        self.unanswered = unanswered
        self.gone = gone


def retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks for: a number or an HTTP date.

    >>> retry_after("7"), retry_after(None), retry_after("soon")
    (7.0, None, None)
    >>> retry_after("Fri, 14 Mar 2025 21:40:30 GMT", datetime(2025, 3, 14, 21, 40, tzinfo=UTC))
    30.0
    """
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def origin(url: str) -> str:
    """Where a request goes, without the path that may be the credential.

    >>> origin("https://hooks.slack.com/services/T0/B0/XyZ")
    'https://hooks.slack.com'
    """
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes
    retry_after: float | None

    @property
    def text(self) -> str:
        """The answer's gist, on one line, for error messages."""
        return printable(one_line(self.body.decode("utf-8", "replace"), 200))

    def json(self) -> dict[str, Any]:
        try:
            data = json.loads(self.body)
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}


class Transport(abc.ABC):
    """Sends messages to one channel."""

    headers: Mapping[str, str] = {}  # sent with every request (credentials: never logged)

    def __init__(
        self,
        channel: Channel,
        *,
        connect_timeout: float,
        read_timeout: float,
        deadline: float | None = None,
        session: requests.Session | None = None,
    ) -> None:
        self.channel = channel
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        # The whole call, connecting to the last byte of the answer: reads
        # that each come in time can still trickle on for minutes.
        self.deadline = connect_timeout + read_timeout if deadline is None else deadline
        from lockwatch.util.http_session import deadline_session  # requests: loaded here

        self.session = session or deadline_session()

    @abc.abstractmethod
    def send(self, message: Message) -> str:
        """Deliver ``message``; return what the receiver answered, in a few words."""

    def fail(
        self,
        message: str,
        *,
        permanent: bool = False,
        retry_after: float | None = None,
        unanswered: bool = False,
        gone: bool = False,
    ) -> TransportError:
        return TransportError(
            redact(message, self.channel.secrets),
            permanent=permanent,
            retry_after=retry_after,
            unanswered=unanswered,
            gone=gone,
        )

    def post(self, url: str, payload: Mapping[str, Any] | list[Any]) -> Answer:
        import requests

        where = origin(url)
        with within(self.deadline) as deadline:
            try:
                answer = self._exchange(url, payload)
            except requests.RequestException as exc:
                if not deadline.expired:
                    raise self._failed(where, exc) from None
        if deadline.expired:
            # Whatever came back was cut short; the request itself went out.
            raise self.fail(
                f"{where} did not answer whole within {self.deadline:g}s (a trickling "
                "answer?): it may have been delivered",
                unanswered=True,
            )
        return answer

    def _exchange(self, url: str, payload: Mapping[str, Any] | list[Any]) -> Answer:
        with self.session.post(
            url,
            json=payload,
            headers=self.headers,
            timeout=(self.connect_timeout, self.read_timeout),
            allow_redirects=False,
            stream=True,
        ) as response:
            body = b""
            for chunk in response.iter_content(8192):
                body += chunk
                if len(body) >= MAX_ANSWER:
                    break
            return Answer(
                response.status_code,
                body[:MAX_ANSWER],
                retry_after(response.headers.get("Retry-After")),
            )

    def _failed(self, where: str, exc: requests.RequestException) -> TransportError:
        import requests

        if isinstance(exc, requests.ConnectTimeout):
            return self.fail(f"connecting to {where} timed out after {self.connect_timeout:g}s")
        if isinstance(exc, requests.ReadTimeout):
            return self.fail(
                f"{where} did not answer within {self.read_timeout:g}s of the request sent "
                "whole: it may have been delivered",
                unanswered=True,
            )
        if isinstance(exc, requests.ConnectionError):
            errno = _ERRNO.search(str(exc))
            reason = errno.group(1).strip() if errno else type(exc).__name__
            return self.fail(f"cannot reach {where}: {reason}")
        return self.fail(f"request to {where} failed: {exc}")

    def refused(
        self, answer: Answer, service: str, detail: str, hints: Mapping[int, str]
    ) -> TransportError:
        """The error for an answer that is not a success: rate limits, timeouts
        and server errors pass, anything else the receiver will refuse again."""
        status = answer.status
        said = f"{service} answered HTTP {status}: {detail}"
        if status == 429:
            return self.fail(f"{said} (rate limited)", retry_after=answer.retry_after)
        if status >= 500 or status == 408:
            return self.fail(said, retry_after=answer.retry_after)
        hint = hints.get(status, "")
        return self.fail(f"{said}{f'; {hint}' if hint else ''}", permanent=True)


class EditingTransport(Transport):
    """A channel that can keep one living message per incident
    (``notify/living.py``): post it, edit it, reply in its thread."""

    @property
    @abc.abstractmethod
    def living(self) -> bool:
        """Whether this channel is configured for living messages."""

    @abc.abstractmethod
    def open(self, message: Message) -> str:
        """Post ``message`` as a living message; the receiver's id of it."""

    @abc.abstractmethod
    def edit(self, ref: str, message: Message) -> None:
        """Make the message ``ref`` say ``message``; TransportError with ``gone``
        when it cannot be edited any more."""

    @abc.abstractmethod
    def reply(self, ref: str, message: Message) -> None:
        """A short reply to the message ``ref``, in its thread."""


# Telegram's words for a message that cannot be edited any more.
_TELEGRAM_GONE = ("message to edit not found", "message can't be edited")
_TELEGRAM_SAME = "message is not modified"  # an edit made twice (a retry): done


class TelegramTransport(EditingTransport):
    channel: TelegramChannel

    _HINTS: ClassVar[Mapping[int, str]] = {
        400: "check chat_id (and that the bot was added to the chat)",
        401: "check bot_token",
        403: "the bot was blocked or removed from the chat",
        404: "check bot_token and api_url",
    }

    @property
    def living(self) -> bool:
        return self.channel.living

    def send(self, message: Message) -> str:
        number = self.call("sendMessage", self._text(document(message))).get("message_id")
        return f"HTTP 200, message {number}" if number is not None else "HTTP 200"

    def open(self, message: Message) -> str:
        number = self.call("sendMessage", self._text(document(message, living=True)))
        if "message_id" not in number:
            raise self.fail("Telegram's answer to sendMessage has no message_id")
        return str(number["message_id"])

    def edit(self, ref: str, message: Message) -> None:
        fields = self._text(document(message, living=True))
        self.call("editMessageText", {**fields, "message_id": self._message_id(ref)})

    def reply(self, ref: str, message: Message) -> None:
        fields = self._text(reply_lines(message))
        replying = {"message_id": self._message_id(ref), "allow_sending_without_reply": True}
        self.call("sendMessage", {**fields, "reply_parameters": replying})

    def _message_id(self, ref: str) -> int:
        """Telegram's id of a kept message; another kind of channel's (the
        channel's type changed under its name) cannot be edited here."""
        if not ref.isdigit():
            raise self.fail(f"{ref!r} is not a Telegram message id", gone=True)
        return int(ref)

    @staticmethod
    def _text(lines: list[Line]) -> dict[str, Any]:
        return {"text": telegram_html(fit(lines, TELEGRAM_LIMIT))}

    def call(self, method: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        """One Bot API call in this channel's chat: its result (an edit made
        twice counts as done); TransportError when it failed."""
        channel = self.channel
        url = f"{channel.api_url.rstrip('/')}/bot{channel.bot_token}/{method}"
        payload = {
            "chat_id": channel.chat_id,
            "parse_mode": "HTML",
            "disable_web_page_preview": True,
            **fields,
        }
        answer = self.post(url, payload)
        data = answer.json()
        if 200 <= answer.status < 300 and "ok" not in data:
            # Not the Bot API: a proxy or a captive portal in between, for now.
            raise self.fail(
                f"Telegram's address answered HTTP {answer.status} with a body that is not "
                f"the Bot API's JSON (a proxy or captive portal?): {answer.text or 'empty'}"
            )
        if answer.status == 200 and data.get("ok") is True:
            result = data.get("result")
            return result if isinstance(result, dict) else {}
        parameters = data.get("parameters")
        wait = parameters.get("retry_after") if isinstance(parameters, dict) else None
        if isinstance(wait, int | float) and not isinstance(wait, bool):
            answer = Answer(answer.status, answer.body, float(wait))
        detail = printable(one_line(data.get("description") or answer.text or "no description"))
        if answer.status == 400 and _TELEGRAM_SAME in detail:
            return {}
        if answer.status == 400 and any(words in detail for words in _TELEGRAM_GONE):
            raise self.fail(f"Telegram answered HTTP 400: {detail}", gone=True)
        raise self.refused(answer, "Telegram", detail, self._HINTS)


class SlackTransport(Transport):
    channel: SlackChannel

    _HINTS: ClassVar[Mapping[int, str]] = {
        400: "Slack could not read the message",
        403: "the webhook may not post to its channel",
        404: "the webhook was removed: create a new one",
        410: "the channel was archived",
    }

    def send(self, message: Message) -> str:
        text = slack_mrkdwn(fit(document(message), SLACK_LIMIT))
        answer = self.post(
            self.channel.webhook_url, {"text": text, "unfurl_links": False, "unfurl_media": False}
        )
        if answer.status == 200:
            return f"HTTP 200 {answer.text}".rstrip()
        raise self.refused(answer, "Slack", answer.text or "no description", self._HINTS)


class WebhookTransport(Transport):
    channel: WebhookChannel

    def __init__(self, channel: WebhookChannel, *, external_url: str = "", **kwargs: Any) -> None:
        super().__init__(channel, **kwargs)
        self.external_url = external_url

    def send(self, message: Message) -> str:
        answer = self.post(self.channel.url, webhook_payload(message, self.external_url))
        if 200 <= answer.status < 300:
            return f"HTTP {answer.status}"
        hints = {status: "follow the redirect in the url" for status in range(300, 400)}
        raise self.refused(answer, "the webhook", answer.text or "no description", hints)


def transport_timeouts(
    settings: NotifySettings, session: requests.Session | None = None
) -> dict[str, Any]:
    """The keywords every transport takes from the notify settings."""
    return {
        "connect_timeout": settings.connect_timeout,
        "read_timeout": settings.read_timeout,
        "deadline": settings.deadline,
        "session": session,
    }

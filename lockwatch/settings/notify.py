"""The ``notify:`` section as frozen values: channels, routes and timings.

:mod:`lockwatch.config.notify` reads these from a config file; the notifier
only reads them. Secrets (a bot
token, a webhook URL) are kept out of ``repr`` and listed by ``secrets`` so
every message that could quote them is redacted.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, ClassVar, Self
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, PlainValidator, model_validator

from lockwatch.model.finding_kinds import FindingKind, Severity
from lockwatch.settings.fields import (
    UNIQUE,
    Name,
    PositiveSeconds,
    Seconds,
    Secret,
    Section,
    Text,
    Whole,
    at_least,
    check,
    distinct,
    not_empty,
    one_of,
    problem_at,
    unique_items,
    wrong_type,
)

if TYPE_CHECKING:
    # Only the routes' methods take findings: a config is read without the
    # evidence classes (model/finding_kinds.py).
    from lockwatch.model.findings import Finding

TELEGRAM_API = "https://api.telegram.org"
SLACK_API = "https://slack.com/api"
DEFAULT_EDIT_INTERVAL = 60.0  # seconds between edits of a living message that only grew
DEFAULT_REPEAT = 4 * 3600.0
DEFAULT_CONNECT_TIMEOUT = 3.0
DEFAULT_READ_TIMEOUT = 10.0
DEFAULT_UNANSWERED_RETRIES = 2
DEFAULT_LEASE = 30.0
# Lease a sender must have left, past a send's deadline, to start the send: the
# time between the check and the call, and the two clocks' rates, are covered.
SEND_MARGIN = 1.0
DEFAULT_RESEND = 60.0  # Prometheus resends firing alerts every minute too


def url_secrets(url: str) -> tuple[str, ...]:
    """A secret URL and the parts of it an HTTP library may quote on its own.

    >>> url_secrets("https://hooks.slack.com/services/T0/B0/XyZ?x=1")
    ('https://hooks.slack.com/services/T0/B0/XyZ?x=1', '/services/T0/B0/XyZ?x=1', '/services/T0/B0/XyZ')
    """
    parts = urlsplit(url)
    path_query = parts.path + (f"?{parts.query}" if parts.query else "")
    found = (url, path_query, parts.path)
    return tuple(dict.fromkeys(s for s in found if s and s != "/"))


_NOT_SHOWN = "(the value is not shown: it may hold a secret)"
_BOT_TOKEN = re.compile(r"[^\s/]+")


def _check_http_url(text: str) -> str | None:
    """
    >>> _check_http_url("https://api.telegram.org") is None
    True
    >>> _check_http_url("api.telegram.org")
    'not an http:// or https:// URL (the value is not shown: it may hold a secret)'
    """
    parts = urlsplit(text)
    if parts.scheme in ("http", "https") and parts.hostname:
        return None
    return f"not an http:// or https:// URL {_NOT_SHOWN}"


def _check_bot_token(text: str) -> str | None:
    if _BOT_TOKEN.fullmatch(text):
        return None
    return f"not a bot token (like 123456:ABC-DEF...) {_NOT_SHOWN}"


def _to_chat_id(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).strip():
        raise wrong_type("a chat id: a number like -1001234567890 or @channelname")
    return str(value).strip()


# in the environment or a *_file, never in the config file, which more eyes read
_SECRET = Secret(literal=False)
HttpUrl = Annotated[Text, check(_check_http_url)]


@dataclass(frozen=True, slots=True)
class TelegramChannel(Section):
    """The Bot API's ``sendMessage``; ``api_url`` for a self-hosted Bot API server.
    ``living``: one message per incident, edited in place (``editMessageText``)."""

    kind: ClassVar[str] = "telegram"
    name: Annotated[Name, UNIQUE]
    bot_token: Annotated[Text, _SECRET, check(_check_bot_token)] = field(repr=False)
    chat_id: Annotated[str, PlainValidator(_to_chat_id)]
    api_url: Annotated[HttpUrl, AfterValidator(lambda url: url.rstrip("/"))] = TELEGRAM_API
    living: bool = False

    @property
    def secrets(self) -> tuple[str, ...]:
        return (self.bot_token,)


@dataclass(frozen=True, slots=True)
class SlackChannel(Section):
    """A Slack incoming webhook; its URL is the credential."""

    kind: ClassVar[str] = "slack"
    name: Annotated[Name, UNIQUE]
    webhook_url: Annotated[HttpUrl, _SECRET] = field(repr=False)

    @property
    def secrets(self) -> tuple[str, ...]:
        return url_secrets(self.webhook_url)


def _check_slack_channel(text: str) -> str | None:
    """
    >>> _check_slack_channel("C0123ABCD") is None
    True
    >>> _check_slack_channel("#ops")
    "not a Slack channel id (like C0123ABCD): chat.update needs the id, not '#ops'"
    """
    if re.fullmatch(r"[CGD][A-Z0-9]{2,}", text):
        return None
    return f"not a Slack channel id (like C0123ABCD): chat.update needs the id, not {text!r}"


@dataclass(frozen=True, slots=True)
class SlackApiChannel(Section):
    """Slack's Web API with a bot token: one message per incident
    (``chat.postMessage``), edited in place (``chat.update``), with replies in
    its thread when it gets worse and when it resolves."""

    kind: ClassVar[str] = "slack_api"
    name: Annotated[Name, UNIQUE]
    bot_token: Annotated[Text, _SECRET] = field(repr=False)  # xoxb-...
    channel: Annotated[Text, check(_check_slack_channel)]
    api_url: Annotated[HttpUrl, AfterValidator(lambda url: url.rstrip("/"))] = SLACK_API
    living: ClassVar[bool] = True  # the reason to use the Web API rather than a webhook

    @property
    def secrets(self) -> tuple[str, ...]:
        return (self.bot_token,)


@dataclass(frozen=True, slots=True)
class WebhookChannel(Section):
    """Any HTTP receiver of Alertmanager's webhook payload (version 4)."""

    kind: ClassVar[str] = "webhook"
    name: Annotated[Name, UNIQUE]
    url: Annotated[HttpUrl, _SECRET] = field(repr=False)

    @property
    def secrets(self) -> tuple[str, ...]:
        return url_secrets(self.url)


def _check_alertmanager_url(text: str) -> str | None:
    """An Alertmanager's own base URL: where ``/api/v2/alerts`` is, without credentials.

    >>> _check_alertmanager_url("http://am-0.am:9093/alertmanager") is None
    True
    >>> _check_alertmanager_url("http://admin:pw@am:9093")
    'holds a user or password: use username with password_file, or bearer_token_file'
    """
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"not an http:// or https:// URL: {text!r}"
    if "@" in parts.netloc:
        return "holds a user or password: use username with password_file, or bearer_token_file"
    if parts.query or parts.fragment:
        return "has a query or fragment: give the Alertmanager's base URL (its --web.external-url)"
    return None


_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def _check_labels(labels: dict[str, str]) -> str | None:
    """
    >>> _check_labels({"team": "db", "env": "prod"}) is None
    True
    >>> _check_labels({"team-name": "db"})
    "'team-name' is not a label name (letters, digits and '_', not starting with a digit)"
    """
    for name in labels:
        if not _LABEL_NAME.fullmatch(name) or name.startswith("__"):
            return (
                f"{name!r} is not a label name (letters, digits and '_', not starting with a digit)"
            )
    return None


AlertmanagerUrl = Annotated[
    Text, check(_check_alertmanager_url), AfterValidator(lambda url: url.rstrip("/"))
]


@dataclass(frozen=True, slots=True)
class AlertmanagerChannel(Section):
    """Every Alertmanager of a cluster, each pushed the open incidents as alerts
    (``POST /api/v2/alerts``) on each change and every ``resend_interval``."""

    kind: ClassVar[str] = "alertmanager"
    name: Annotated[Name, UNIQUE]
    # each Alertmanager's own address, never a load balancer in front of them
    urls: Annotated[
        tuple[AlertmanagerUrl, ...],
        not_empty("needs at least one Alertmanager URL"),
        unique_items(repr),
    ]
    # firing alerts are sent again this often and end 4 x this after the last push
    resend_interval: Annotated[Seconds, at_least(1.0, "1s")] = DEFAULT_RESEND
    labels: Annotated[dict[str, Text], check(_check_labels)] = field(default_factory=dict)
    # how people reach this lockwatch's status page: each alert's generatorURL
    external_url: HttpUrl | None = None
    username: Text | None = None  # basic auth, with password_file
    password: Annotated[Text | None, _SECRET] = field(default=None, repr=False)
    bearer_token: Annotated[Text | None, _SECRET] = field(default=None, repr=False)

    @model_validator(mode="after")
    def _one_way_in(self) -> Self:
        if (self.username is None) != (self.password is None):
            missing = "password" if self.password is None else "username"
            raise problem_at((missing,), "basic auth needs both username and password_file")
        if self.password is not None and self.bearer_token is not None:
            raise problem_at(("bearer_token",), "use basic auth or a bearer token, not both")
        return self

    @property
    def secrets(self) -> tuple[str, ...]:
        return tuple(s for s in (self.password, self.bearer_token) if s)


# one message per change, or one living message per incident
MessageChannel = TelegramChannel | SlackChannel | SlackApiChannel | WebhookChannel
Channel = MessageChannel | AlertmanagerChannel
CHANNEL_TYPES: dict[str, type[Channel]] = {
    cls.kind: cls
    for cls in (TelegramChannel, SlackChannel, SlackApiChannel, WebhookChannel, AlertmanagerChannel)
}


@dataclass(frozen=True, slots=True)
class Timing:
    """When a channel hears of one finding."""

    for_duration: float  # seconds the finding must have lasted before it is announced
    repeat_interval: float | None  # seconds between reminders while it lasts; None: never
    times: int = 1  # openings of its incident within ``within`` before it is announced
    within: float | None = None


@dataclass(frozen=True, slots=True)
class Route(Section):
    """Findings that match every given criterion go to ``channels``; an empty
    criterion matches anything."""

    channels: Annotated[tuple[Text, ...], distinct]
    kinds: frozenset[Annotated[FindingKind, one_of(FindingKind, "finding kind")]] = frozenset()
    severities: frozenset[Annotated[Severity, one_of(Severity, "severity")]] = frozenset()
    # target names or fnmatch patterns
    targets: Annotated[tuple[Text, ...], distinct] = ()
    # None: the notify section's
    for_duration: Annotated[Seconds | None, Field(alias="for")] = None
    repeat_interval: Seconds | None = None  # None: the notify section's; 0: never
    # A flapping root told only once it has opened this many times within ``within``.
    times: Annotated[Whole, at_least(1, "1")] = 1
    within: PositiveSeconds | None = None

    @model_validator(mode="after")
    def _times_within(self) -> Self:
        if self.times > 1 and self.within is None:
            raise problem_at(("times",), "times needs within: the window they must fall in")
        return self

    def matches(self, finding: Finding) -> bool:
        return (
            (not self.kinds or finding.kind in self.kinds)
            and (not self.severities or finding.severity in self.severities)
            and (
                not self.targets
                or any(fnmatch.fnmatchcase(finding.target, pattern) for pattern in self.targets)
            )
        )


@dataclass(frozen=True, slots=True)
class NotifySettings(Section):
    channels: tuple[Channel, ...] = ()
    # Every route that matches adds its channels; without routes every finding
    # goes to every channel.
    routes: tuple[Route, ...] = ()
    for_duration: Annotated[Seconds, Field(alias="for")] = 0.0
    repeat_interval: Seconds = DEFAULT_REPEAT  # 0: never
    connect_timeout: PositiveSeconds = DEFAULT_CONNECT_TIMEOUT
    read_timeout: PositiveSeconds = DEFAULT_READ_TIMEOUT
    # The whole call, connecting to the answer's last byte; None:
    # connect_timeout + read_timeout.
    deadline: PositiveSeconds | None = None
    # Sends again of a request sent whole whose answer timed out: it may have
    # been delivered, so each one may tell it twice.
    unanswered_retries: Annotated[Whole, at_least(0, "0")] = DEFAULT_UNANSWERED_RETRIES
    # With a replica name: the sender's lease in the shared store, renewed every third of it.
    lease: PositiveSeconds = DEFAULT_LEASE
    # Replicas elect one sender per shard and group (docs/fleet.md); None: the shard's only.
    group: Name | None = None
    # A living message (slack_api, telegram with living) that only grew is edited this often at most.
    edit_interval: PositiveSeconds = DEFAULT_EDIT_INTERVAL

    @property
    def send_deadline(self) -> float:
        """Seconds one delivery attempt may take, connecting to the last byte."""
        return self.deadline or self.connect_timeout + self.read_timeout

    @property
    def shortest_lease(self) -> float:
        """The least lease that lets a sender send between renewals: it sends
        with ``send_deadline + SEND_MARGIN`` left, and renews every third.

        >>> NotifySettings().shortest_lease
        21.0
        """
        return 1.5 * (self.send_deadline + SEND_MARGIN)

    @property
    def secrets(self) -> tuple[str, ...]:
        return tuple(secret for channel in self.channels for secret in channel.secrets)

    def living(self, channel: str) -> bool:
        """Whether ``channel`` keeps one message per incident, edited in place."""
        return any(c.name == channel and getattr(c, "living", False) for c in self.channels)

    def timing(self, finding: Finding, channel: str) -> Timing | None:
        """How ``channel`` hears of ``finding``, or None when no route sends it there.

        When several routes send it there, the shortest ``for`` and the
        shortest repeat interval win: no route is ever made to wait longer
        than it asked.
        """
        routes = self.routes or (Route(tuple(c.name for c in self.channels)),)
        matched = [
            route for route in routes if channel in route.channels and route.matches(finding)
        ]
        if not matched:
            return None
        for_duration = min(
            self.for_duration if route.for_duration is None else route.for_duration
            for route in matched
        )
        repeats = [
            self.repeat_interval if route.repeat_interval is None else route.repeat_interval
            for route in matched
        ]
        positive = [seconds for seconds in repeats if seconds > 0]
        # The least demanding route wins here too: a route without ``times`` tells at once.
        flapping = min(matched, key=lambda route: route.times)
        return Timing(
            for_duration, min(positive) if positive else None, flapping.times, flapping.within
        )

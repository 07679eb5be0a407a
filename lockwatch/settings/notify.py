"""The ``notify:`` section as frozen values: channels, routes and timings.

``config.py`` builds these; the notifier only reads them. Secrets (a bot
token, a webhook URL) are kept out of ``repr`` and listed by ``secrets`` so
every message that could quote them is redacted.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import ClassVar
from urllib.parse import urlsplit

from lockwatch.model.findings import Finding, FindingKind, Severity

TELEGRAM_API = "https://api.telegram.org"
DEFAULT_REPEAT = 4 * 3600.0
DEFAULT_CONNECT_TIMEOUT = 3.0
DEFAULT_READ_TIMEOUT = 10.0


def url_secrets(url: str) -> tuple[str, ...]:
    """A secret URL and the parts of it an HTTP library may quote on its own.

    >>> url_secrets("https://hooks.slack.com/services/T0/B0/XyZ?x=1")
    ('https://hooks.slack.com/services/T0/B0/XyZ?x=1', '/services/T0/B0/XyZ?x=1', '/services/T0/B0/XyZ')
    """
    parts = urlsplit(url)
    path_query = parts.path + (f"?{parts.query}" if parts.query else "")
    found = (url, path_query, parts.path)
    return tuple(dict.fromkeys(s for s in found if s and s != "/"))


@dataclass(frozen=True, slots=True)
class TelegramChannel:
    """The Bot API's ``sendMessage``; ``api_url`` for a self-hosted Bot API server."""

    kind: ClassVar[str] = "telegram"
    name: str
    bot_token: str = field(repr=False)
    chat_id: str
    api_url: str = TELEGRAM_API

    @property
    def secrets(self) -> tuple[str, ...]:
        return (self.bot_token,)


@dataclass(frozen=True, slots=True)
class SlackChannel:
    """A Slack incoming webhook; its URL is the credential."""

    kind: ClassVar[str] = "slack"
    name: str
    webhook_url: str = field(repr=False)

    @property
    def secrets(self) -> tuple[str, ...]:
        return url_secrets(self.webhook_url)


@dataclass(frozen=True, slots=True)
class WebhookChannel:
    """Any HTTP receiver of Alertmanager's webhook payload (version 4)."""

    kind: ClassVar[str] = "webhook"
    name: str
    url: str = field(repr=False)

    @property
    def secrets(self) -> tuple[str, ...]:
        return url_secrets(self.url)


Channel = TelegramChannel | SlackChannel | WebhookChannel
CHANNEL_TYPES: dict[str, type[Channel]] = {
    cls.kind: cls for cls in (TelegramChannel, SlackChannel, WebhookChannel)
}


@dataclass(frozen=True, slots=True)
class Timing:
    """When a channel hears of one finding."""

    for_duration: float  # seconds the finding must have lasted before it is announced
    repeat_interval: float | None  # seconds between reminders while it lasts; None: never


@dataclass(frozen=True, slots=True)
class Route:
    """Findings that match every given criterion go to ``channels``; an empty
    criterion matches anything."""

    channels: tuple[str, ...]
    kinds: frozenset[FindingKind] = frozenset()
    severities: frozenset[Severity] = frozenset()
    targets: tuple[str, ...] = ()  # target names or fnmatch patterns
    for_duration: float | None = None  # None: the notify section's
    repeat_interval: float | None = None  # None: the notify section's; 0: never

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
class NotifySettings:
    channels: tuple[Channel, ...] = ()
    # Every route that matches adds its channels; without routes every finding
    # goes to every channel.
    routes: tuple[Route, ...] = ()
    for_duration: float = 0.0
    repeat_interval: float = DEFAULT_REPEAT  # 0: never
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    read_timeout: float = DEFAULT_READ_TIMEOUT

    @property
    def secrets(self) -> tuple[str, ...]:
        return tuple(secret for channel in self.channels for secret in channel.secrets)

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
        return Timing(for_duration, min(positive) if positive else None)

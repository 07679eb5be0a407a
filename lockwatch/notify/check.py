"""``lockwatch notify-test``: one test message through each channel, once,
so the operator sees what each receiver answers."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lockwatch.notify.alertmanager import push_test_alert
from lockwatch.notify.message import Message
from lockwatch.notify.slack_api import make_transport
from lockwatch.notify.transports import TransportError
from lockwatch.settings.notify import AlertmanagerChannel, Channel, NotifySettings
from lockwatch.util.clock import Clock, utc_now

if TYPE_CHECKING:
    import requests


@dataclass(frozen=True, slots=True)
class ChannelCheck:
    channel: Channel
    ok: bool
    said: str  # what the receiver answered, or why the message did not go through
    then: str = ""  # for a failure, what lockwatch would do next


def send_test(
    settings: NotifySettings,
    only: Collection[str] = (),
    *,
    external_url: str = "",
    clock: Clock = utc_now,
    session: requests.Session | None = None,
) -> Iterator[ChannelCheck]:
    """Send a test message through each channel (or those in ``only``), once,
    without retrying: the operator wants to see what each receiver says. An
    alertmanager channel pushes a test alert to each of its Alertmanagers."""
    for channel in settings.channels:
        if only and channel.name not in only:
            continue
        message = Message(uuid.uuid4().hex, channel.name, clock())
        if isinstance(channel, AlertmanagerChannel):
            yield ChannelCheck(channel, *push_test_alert(channel, settings, message, session))
            continue
        transport = make_transport(channel, settings, external_url=external_url, session=session)
        try:
            answer = transport.send(message)
        except TransportError as exc:
            if exc.permanent:
                then = "sending again will not help"
            elif exc.retry_after is not None:
                then = f"lockwatch would retry in {exc.retry_after:g}s"
            else:
                then = "lockwatch would retry with backoff"
            yield ChannelCheck(channel, False, str(exc), then)
        else:
            yield ChannelCheck(channel, True, answer)

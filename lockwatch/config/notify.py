"""The ``notify:`` section: channels with their secrets, routes and timings.

Every key is a field of :mod:`lockwatch.settings.notify`, by its name or alias.
Where the YAML differs, it is here:

- A channel's ``type`` chooses its dataclass; the keys of other types are refused.
- A route names channels of this section and targets of the file (or
  patterns of target names).
- With a ``replica`` name (or ``--replica``), the channels need the shared
  store (``pings.dsn``) to elect their sender in, and a ``lease`` long enough
  to send between renewals.
"""

from __future__ import annotations

from typing import Annotated

from lockwatch.config.keys import field_key, file_keys
from lockwatch.config.reader import Reading, Shape
from lockwatch.config.targets import TARGETS
from lockwatch.config.yamldata import FAILED, Loc, YamlList, YamlMap, entries, kind, subset
from lockwatch.settings.fields import Text, check, did_you_mean
from lockwatch.settings.notify import CHANNEL_TYPES, NotifySettings, Route, WebhookChannel
from lockwatch.settings.targets import Settings
from lockwatch.text import format_short_duration as duration

_TYPE = "type"
_NAME = field_key(WebhookChannel, "name")  # every channel has this name


def _check_type(name: str) -> str | None:
    if name in CHANNEL_TYPES:
        return None
    return f"unknown channel type {name!r} ({did_you_mean(name, CHANNEL_TYPES)})"


ChannelType = Annotated[Text, check(_check_type)]
_CHANNEL_KEYS = tuple(dict.fromkeys(k for cls in CHANNEL_TYPES.values() for k in file_keys(cls)))


def notify_shapes() -> dict[type, Shape]:
    return {NotifySettings: _NotifyShape(), Route: _RouteShape()}


class _NotifyShape(Shape):
    def before(self, reading: Reading, raw: YamlMap, data: dict[str, object]) -> dict[str, object]:
        channels = data.get("channels")
        if isinstance(channels, YamlList):
            data["channels"] = tuple(
                _channel(reading, loc, item) for loc, item in entries(channels)
            )
        return data


def _channel(reading: Reading, loc: Loc, raw: object) -> object:
    if not isinstance(raw, YamlMap):
        reading.report(loc, f"expected a mapping (key: value), got {kind(raw)}")
        return FAILED
    data = reading.known(raw, (_TYPE, *_CHANNEL_KEYS))
    chosen: object = FAILED
    if _TYPE in data:
        chosen = reading.value(ChannelType, data[_TYPE], (*loc, _TYPE))
    else:
        reading.report(loc, f"missing required key {_TYPE!r}")
    if not isinstance(chosen, str):
        # the name is still taken, and still checked
        if _NAME.key in data:
            reading.claim(raw, _NAME)
            reading.value(_NAME.annotation, data[_NAME.key], (*loc, _NAME.key))
        return FAILED
    cls = CHANNEL_TYPES[chosen]
    own = file_keys(cls)
    for key in data.keys() - {_TYPE, *own}:
        those = ", ".join((_NAME.key, _TYPE, *(k for k in own if k != _NAME.key)))
        article = "an" if chosen[0] in "aeiou" else "a"
        reading.report((*loc, key), f"not a key of {article} {chosen} channel (those are: {those})")
    return reading.value(cls, subset(raw, own), loc)


class _RouteShape(Shape):
    def before(self, reading: Reading, raw: YamlMap, data: dict[str, object]) -> dict[str, object]:
        channels = reading.names((*raw.loc[:-2], "channels"))
        chosen = 0
        for loc, item in entries(data.get("channels")):
            name = reading.peek(Text, item)
            if name in channels:
                chosen += 1
            elif name is not None:
                message = f"unknown channel {name!r} ({did_you_mean(name, channels)})"
                reading.report(loc, message)
        if "channels" in data and not chosen:
            reading.report((*raw.loc, "channels"), "needs at least one channel")
        targets = reading.names(TARGETS)
        for loc, item in entries(data.get("targets")):
            name = reading.peek(Text, item)
            if name is not None and not any(c in name for c in "*?[") and name not in targets:
                message = f"no target is named {name!r} ({did_you_mean(name, targets)})"
                reading.report(loc, message)
        return data


def check_sender_election(reading: Reading, settings: Settings, flag: str | None) -> None:
    """Replicas that notify elect one sender through the shared store: without
    it each would send every message. ``flag``: the replica name from --replica."""
    notify = settings.notify
    if settings.replica is None or not notify.channels:
        return
    by = "--replica" if flag is not None else "replica"
    if settings.pings.store_dsn is None:
        reading.report(
            ("replica",) if flag is None else ("notify",),
            f"{by} {settings.replica} elects one sender of notifications among the "
            "replicas through the shared store: set pings.store: postgres and pings.dsn",
            key=True,
        )
    if notify.lease < notify.shortest_lease:
        reading.report(
            ("notify", "lease"),  # the notify section's line when lease is not given
            f"lease {duration(notify.lease)} is too short: a sender renews it every third "
            f"and sends only with the deadline ({duration(notify.send_deadline)}) and 1s of "
            f"it left, so it must be at least {duration(notify.shortest_lease)}",
        )

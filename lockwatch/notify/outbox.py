"""Deciding what one channel is told, and keeping it until it is delivered.

``evaluate`` is pure: from what the channel was already told (``announced``,
by incident id), the incidents open now, those just resolved and the clock, it
makes the messages that are due: one per incident when it opens, when it gets
worse (a finding kind joins, its severity rises), when its repeat interval
passed, and when it resolves. However many findings an incident has (a session
holding 4,001 locks), it is one message.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from lockwatch.model.incidents import SEVERITY_RANK, Incident
from lockwatch.notify.message import Headline, Message, Notice
from lockwatch.settings.notify import NotifySettings, Timing


@dataclass(frozen=True, slots=True)
class Announced:
    """An incident the channel was told about, as last seen, and when it last was."""

    notice: Notice
    kinds: tuple[str, ...]  # every finding kind it had when last told
    sent_at: datetime


@dataclass(frozen=True, slots=True)
class Due:
    """When a channel hears of an incident: from the routes of its findings."""

    at: datetime  # the earliest moment one of its routed findings has lasted its ``for``
    repeat_interval: float | None


def due(settings: NotifySettings, incident: Incident, channel: str) -> Due | None:
    """How ``channel`` hears of ``incident``, or None when no route sends any
    of its findings there. The earliest ``for`` and the shortest repeat win."""
    timings: list[tuple[datetime, Timing]] = []
    for finding in incident.findings:
        timing = settings.timing(finding, channel)
        if timing is not None:
            timings.append((finding.since, timing))
    if not timings:
        return None
    at = min(since + timedelta(seconds=t.for_duration) for since, t in timings)
    repeats = [t.repeat_interval for _, t in timings if t.repeat_interval is not None]
    return Due(at, min(repeats) if repeats else None)


def _worse(told: Announced, incident: Incident) -> bool:
    new_kinds = {kind.value for kind in incident.kinds} - set(told.kinds)
    return bool(new_kinds) or SEVERITY_RANK[incident.severity] < SEVERITY_RANK[told.notice.severity]


def evaluate(
    channel: str,
    settings: NotifySettings,
    announced: Mapping[str, Announced],
    active: Iterable[Incident],
    resolved: Mapping[str, Incident],
    reported: Collection[str],
    now: datetime,
    new_id: Callable[[], str],
) -> tuple[dict[str, Announced], list[Message]]:
    """What ``channel`` must be told now, and what it will then have been told.

    An announced incident no longer open is told resolved (with its final
    state when ``resolved`` has it), but only for targets in ``reported``
    (polled since the start): before its first poll, nobody knows. One that
    is still open but no longer routed here is dropped without a word.
    """
    after: dict[str, Announced] = {}
    messages: list[Message] = []
    open_ids: set[str] = set()
    for incident in sorted(active, key=lambda i: (i.opened_at, i.id)):
        open_ids.add(incident.id)
        timing = due(settings, incident, channel)
        told = announced.get(incident.id)
        if timing is None:
            continue
        headline: Headline | None = None
        if told is None:
            headline = Headline.OPENED if now >= timing.at else None
        elif _worse(told, incident):
            headline = Headline.WORSE
        elif timing.repeat_interval is not None and now - told.sent_at >= timedelta(
            seconds=timing.repeat_interval
        ):
            headline = Headline.REMINDER
        notice = Notice.of(incident, () if told is None else told.kinds)
        kinds = tuple(kind.value for kind in incident.kinds)
        if headline is not None:
            messages.append(Message(new_id(), channel, now, notice, headline))
            after[incident.id] = Announced(notice, kinds, now)
        elif told is not None:
            after[incident.id] = Announced(notice, told.kinds, told.sent_at)
    for incident_id, told in announced.items():
        if incident_id in open_ids:
            continue
        if told.notice.target not in reported:
            after[incident_id] = told
            continue
        final = resolved.get(incident_id)
        notice = told.notice if final is None else Notice.of(final, told.kinds)
        messages.append(Message(new_id(), channel, now, notice, Headline.RESOLVED))
    return after, messages


@dataclass(frozen=True, slots=True)
class Pending:
    """A message in the outbox, with its delivery attempts so far."""

    message: Message
    next_attempt: datetime
    attempts: int = 0
    unanswered: int = 0  # attempts sent whole whose answer timed out


@dataclass
class ChannelState:
    """Everything a channel's worker keeps across restarts."""

    announced: dict[str, Announced] = field(default_factory=dict)
    outbox: list[Pending] = field(default_factory=list)

    def dump(self) -> dict[str, Any]:
        return {
            "announced": [
                {
                    "notice": told.notice.dump(),
                    "kinds": list(told.kinds),
                    "sent_at": told.sent_at.isoformat(),
                }
                for told in self.announced.values()
            ],
            "outbox": [
                {
                    "message": pending.message.dump(),
                    "next_attempt": pending.next_attempt.isoformat(),
                    "attempts": pending.attempts,
                    "unanswered": pending.unanswered,
                }
                for pending in self.outbox
            ],
        }

    @classmethod
    def load(cls, document: Mapping[str, Any]) -> ChannelState:
        """Whatever of a saved state can be read; what cannot is dropped: an
        incident then announces again, which beats never announcing it."""
        state = cls()
        announced = document.get("announced")
        for item in announced if isinstance(announced, list) else ():
            try:
                notice = Notice.load(item["notice"])
                kinds = tuple(str(kind) for kind in item["kinds"])
                sent_at = datetime.fromisoformat(item["sent_at"])
            except (KeyError, TypeError, ValueError):
                continue
            if sent_at.tzinfo is not None:
                state.announced[notice.incident] = Announced(notice, kinds, sent_at)
        outbox = document.get("outbox")
        for item in outbox if isinstance(outbox, list) else ():
            try:
                message = Message.load(item["message"])
                next_attempt = datetime.fromisoformat(item["next_attempt"])
                attempts = int(item["attempts"])
                unanswered = int(item.get("unanswered", 0))
            except (KeyError, TypeError, ValueError, OverflowError):
                continue
            if message is not None and next_attempt.tzinfo is not None:
                state.outbox.append(Pending(message, next_attempt, attempts, unanswered))
        return state

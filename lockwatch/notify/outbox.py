"""Deciding what one channel is told, and keeping it until it is delivered.

``evaluate`` is pure: from what the channel was already told (``announced``,
by the incident's root), the incidents open now, those just resolved and the clock, it
makes the messages that are due: one per incident when it opens, when it gets
worse (a finding kind joins, its severity rises), when its repeat interval
passed, and when it resolves. However many findings an incident has (a session
holding 4,001 locks), it is one message.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from lockwatch.model.incidents import SEVERITY_RANK, Incident
from lockwatch.notify.living import Thread
from lockwatch.notify.message import Headline, Message, Notice
from lockwatch.settings.notify import NotifySettings, Timing


@dataclass(frozen=True, slots=True)
class Announced:
    """An incident the channel was told about, as last seen, and when it last was."""

    notice: Notice
    kinds: tuple[str, ...]  # every finding kind it had when last told
    sent_at: datetime
    shown: str = ""  # a living message's text when last told (its digest): edited on change


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
        if timing is not None and _flapped_enough(incident, timing):
            timings.append((finding.since, timing))
    if not timings:
        return None
    at = min(since + timedelta(seconds=t.for_duration) for since, t in timings)
    repeats = [t.repeat_interval for _, t in timings if t.repeat_interval is not None]
    return Due(at, min(repeats) if repeats else None)


def _flapped_enough(incident: Incident, timing: Timing) -> bool:
    """Whether the incident opened ``times`` within ``within`` (up to its latest
    opening), as a route that only wants flapping roots asks."""
    if timing.times <= 1 or timing.within is None:
        return True
    latest = incident.openings[-1]
    window = latest - timedelta(seconds=timing.within)
    return sum(1 for at in incident.openings if at >= window) >= timing.times


def shown(notice: Notice) -> str:
    """What a living message shows of ``notice``, as a digest: edited when it changes."""
    text = json.dumps(notice.dump(), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _severity_rose(told: Announced, incident: Incident) -> bool:
    return SEVERITY_RANK[incident.severity] < SEVERITY_RANK[told.notice.severity]


def _worse(told: Announced, incident: Incident) -> bool:
    new_kinds = {kind.value for kind in incident.kinds} - set(told.kinds)
    return bool(new_kinds) or _severity_rose(told, incident)


def _as_told(notice: Notice, told: Announced | None) -> Notice:
    """The channel knows an incident by the id and start it was first told
    with: another replica's, after a takeover."""
    if told is None:
        return notice
    return replace(notice, incident=told.notice.incident, opened_at=told.notice.opened_at)


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

    What was told is keyed by the incident's root (``Notice.key``), the same
    on every replica: a replica taking over knows what the last sender told
    under its own ids. A root whose told incident is in ``resolved`` and that
    has another one open now gets both: the resolution, then the new one.
    An announced incident no longer open is told resolved (with its final
    state when ``resolved`` has it), but only for targets in ``reported``
    (polled since the start): before its first poll, nobody knows. One that
    is still open but no longer routed here is dropped without a word.
    """
    after: dict[str, Announced] = {}
    messages: list[Message] = []
    living = settings.living(channel)
    edit_every = timedelta(seconds=settings.edit_interval)
    finals = {i.fingerprint: i for i in sorted(resolved.values(), key=_resolved_order)}
    seen: set[str] = set()  # the keys of the open incidents, and their ids
    for incident in sorted(active, key=lambda i: (i.opened_at, i.id)):
        seen |= {incident.fingerprint, incident.id}
        # an outbox of an older lockwatch has its incidents by id
        told = announced.get(incident.fingerprint) or announced.get(incident.id)
        ended = incident.fingerprint in finals  # since the last look, on this replica
        if told is not None and told.notice.incident != incident.id and ended:
            messages.append(_resolution(channel, told, resolved, finals, now, new_id))
            told = None
        timing = due(settings, incident, channel)
        if timing is None:
            continue
        notice = _as_told(Notice.of(incident, () if told is None else told.kinds), told)
        kinds = tuple(kind.value for kind in incident.kinds)
        digest = shown(notice) if living else ""
        headline = _headline(told, incident, timing, now)
        if living and told is not None and headline is Headline.WORSE:
            # a kind joining is edited in; a phone rings when the severity rises
            headline = Headline.WORSE if _severity_rose(told, incident) else Headline.UPDATED
        if living and headline is None and told is not None and told.shown != digest:
            headline = Headline.UPDATED if now - told.sent_at >= edit_every else None
        if headline is not None:
            messages.append(Message(new_id(), channel, now, notice, headline))
            after[notice.key] = Announced(notice, kinds, now, digest)
        elif told is not None:
            after[notice.key] = replace(told, notice=notice)
    for key, told in announced.items():
        if key in seen:
            continue
        if told.notice.target not in reported:
            after[key] = told
            continue
        messages.append(_resolution(channel, told, resolved, finals, now, new_id))
    return after, messages


def _headline(
    told: Announced | None, incident: Incident, timing: Due, now: datetime
) -> Headline | None:
    """Why the channel is told of an open incident now, if it is."""
    if told is None:
        return Headline.OPENED if now >= timing.at else None
    if _worse(told, incident):
        return Headline.WORSE
    repeat = timing.repeat_interval
    if repeat is not None and now - told.sent_at >= timedelta(seconds=repeat):
        return Headline.REMINDER
    return None


def _resolved_order(incident: Incident) -> tuple[datetime, str]:
    return (incident.resolved_at or incident.updated_at, incident.id)


def _resolution(
    channel: str,
    told: Announced,
    resolved: Mapping[str, Incident],
    finals: Mapping[str, Incident],
    now: datetime,
    new_id: Callable[[], str],
) -> Message:
    """The incident ``told`` is over: with its final state when this replica
    saw it end (by its id, or its root's when another replica announced it)."""
    final = resolved.get(told.notice.incident) or finals.get(told.notice.fingerprint)
    notice = told.notice if final is None else _as_told(Notice.of(final, told.kinds), told)
    return Message(new_id(), channel, now, notice, Headline.RESOLVED)


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
    # A living channel's message of each incident, by its root: where to edit it.
    threads: dict[str, Thread] = field(default_factory=dict)

    def queue(self, messages: Iterable[Message], now: datetime, living: bool) -> None:
        """Put ``messages`` in the outbox. A living channel's edit that only
        grew (an update) is superseded by any later message of its incident,
        which edits the same message to the latest text: behind a rate limit,
        the outbox keeps one edit per incident, not one per look, and the
        wait the receiver asked for still holds for the edit that replaces it."""
        for message in messages:
            due_at = now
            if living and message.notice is not None:
                key = message.notice.key
                superseded = [
                    pending
                    for pending in self.outbox
                    if pending.message.headline is Headline.UPDATED
                    and pending.message.notice is not None
                    and pending.message.notice.key == key
                ]
                due_at = max([now, *(pending.next_attempt for pending in superseded)])
                self.outbox = [pending for pending in self.outbox if pending not in superseded]
            self.outbox.append(Pending(message, due_at))

    def dump(self) -> dict[str, Any]:
        return {
            "threads": [thread.dump() for thread in self.threads.values()],
            "announced": [
                {
                    "notice": told.notice.dump(),
                    "kinds": list(told.kinds),
                    "sent_at": told.sent_at.isoformat(),
                    "shown": told.shown,
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
                shown_before = str(item.get("shown") or "")
                state.announced[notice.key] = Announced(notice, kinds, sent_at, shown_before)
        threads = document.get("threads")
        for item in threads if isinstance(threads, list) else ():
            thread = Thread.load(item)
            if thread is not None:
                state.threads[thread.key] = thread
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

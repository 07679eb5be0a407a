"""Deciding what one channel is told, and keeping it until it is delivered.

``evaluate`` is pure: from what the channel was already told (``announced``),
the findings active now and the clock, it makes the messages that are due.
Related findings travel together: findings on the same target and subject,
and findings that name another in ``related`` (a stalled queue names the
lock findings about the lock its workers wait on so), form one group; when anything in a group is due, one message tells the group's whole
state, and every finding in it counts as announced.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from lockwatch.model.findings import Finding, Subject
from lockwatch.notify.message import Entry, EntryState, Message, order_entries
from lockwatch.settings.notify import NotifySettings
from lockwatch.state.ledger import dump_finding, load_finding


def _subject_values(subject: Subject) -> dict[str, str]:
    return {k: v for k, v in subject.as_dict().items() if v}


def finding_key(finding: Finding) -> str:
    """A finding's identity as a string, for JSON and dict keys.

    >>> from lockwatch.model.evidence import OverflowEvidence
    >>> finding_key(Finding("lock_convoy", "main", Subject("app", "42"), "critical",
    ...             datetime(2025, 1, 1), "x", OverflowEvidence(1, ("app/42",), 100)))
    '["lock_convoy", "main", {"database": "app", "lock": "42"}]'
    """
    subject = _subject_values(finding.subject)
    return json.dumps([str(finding.kind), finding.target, subject], sort_keys=True)


def _place(target: str, subject: Subject) -> str:
    return json.dumps([target, _subject_values(subject)], sort_keys=True)


def groups(findings: Iterable[Finding]) -> list[list[Finding]]:
    """Findings joined by shared subjects and relations, each group in input order."""
    parent: dict[str, str] = {}

    def root(place: str) -> str:
        parent.setdefault(place, place)
        while parent[place] != place:
            parent[place] = parent[parent[place]]
            place = parent[place]
        return place

    listed = list(findings)
    for finding in listed:
        own = root(_place(finding.target, finding.subject))
        for related in finding.related:
            parent[root(_place(related.target, related.subject))] = own
    grouped: dict[str, list[Finding]] = {}
    for finding in listed:
        grouped.setdefault(root(_place(finding.target, finding.subject)), []).append(finding)
    return list(grouped.values())


@dataclass(frozen=True, slots=True)
class Announced:
    """A finding the channel was told about, as last seen, and when it last was."""

    finding: Finding
    sent_at: datetime


def evaluate(
    channel: str,
    settings: NotifySettings,
    announced: Mapping[str, Announced],
    active: Iterable[Finding],
    reported: Collection[str],
    now: datetime,
    new_id: Callable[[], str],
) -> tuple[dict[str, Announced], list[Message]]:
    """What ``channel`` must be told now, and what it will then have been told.

    A finding is due once it has lasted its route's ``for``, or when its
    repeat interval has passed since it was last told. An announced finding
    no longer active is resolved, but only for targets in ``reported``
    (polled since the start): before its first poll, nobody knows. One that
    is still active but no longer routed here is dropped without a word.
    """
    routed, due, active_keys = _routed_and_due(channel, settings, announced, active, now)
    resolved = {
        key: told
        for key, told in announced.items()
        if key not in active_keys and told.finding.target in reported
    }
    after: dict[str, Announced] = {}
    for key, told in announced.items():
        if key in routed:
            after[key] = Announced(routed[key], told.sent_at)
        elif key not in active_keys and key not in resolved:
            after[key] = told
    messages = []
    findings = [*routed.values(), *(told.finding for told in resolved.values())]
    for group in sorted(groups(findings), key=lambda g: min(f.since for f in g)):
        keys = [finding_key(f) for f in group]
        if not any(key in due or key in resolved for key in keys):
            continue
        entries = []
        for key, finding in zip(keys, group, strict=True):
            if key in resolved:
                entries.append(Entry(EntryState.RESOLVED, finding))
                continue
            state = EntryState.FIRING if key in announced else EntryState.NEW
            entries.append(Entry(state, finding))
            after[key] = Announced(finding, now)
        messages.append(Message(new_id(), channel, now, order_entries(entries)))
    return after, messages


def _routed_and_due(
    channel: str,
    settings: NotifySettings,
    announced: Mapping[str, Announced],
    active: Iterable[Finding],
    now: datetime,
) -> tuple[dict[str, Finding], set[str], set[str]]:
    """The active findings routed to ``channel`` by key, the keys of those due
    now, and the keys of every active finding."""
    routed: dict[str, Finding] = {}
    due: set[str] = set()
    active_keys: set[str] = set()
    for finding in active:
        key = finding_key(finding)
        active_keys.add(key)
        timing = settings.timing(finding, channel)
        if timing is None:
            continue
        routed[key] = finding
        told = announced.get(key)
        if told is None:
            lasted = max(0.0, (now - finding.since).total_seconds())
            if lasted >= timing.for_duration:
                due.add(key)
        elif timing.repeat_interval is not None and now - told.sent_at >= timedelta(
            seconds=timing.repeat_interval
        ):
            due.add(key)
    return routed, due, active_keys


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
                {"finding": dump_finding(told.finding), "sent_at": told.sent_at.isoformat()}
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
        """Whatever of a saved state can be read; what cannot is dropped: a
        finding then announces again, which beats never announcing it."""
        state = cls()
        announced = document.get("announced")
        for item in announced if isinstance(announced, list) else ():
            try:
                finding = load_finding(item["finding"])
                sent_at = datetime.fromisoformat(item["sent_at"])
            except (KeyError, TypeError, ValueError):
                continue
            if finding is not None and sent_at.tzinfo is not None:
                state.announced[finding_key(finding)] = Announced(finding, sent_at)
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

"""One living message per incident, for channels that can edit what they sent
(Telegram with ``living: true``, Slack's Web API).

The message is posted once, when the incident opens, and edited in place as
it grows; a short reply in its thread goes out only when it gets worse (its
severity rises), comes back (flapping) or resolves, so a phone rings for those
and nothing else. Where
each incident's message is (its ``Thread``) is part of the channel's state:
saved with the outbox in the state dir or the shared store, it outlives a
restart and a fail-over to another replica. A message the receiver no longer
lets edit (deleted, too old) is posted anew, once, and the new one is kept.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from lockwatch.notify.message import Headline, Message, Notice
from lockwatch.notify.transports import EditingTransport, Transport, TransportError

log = logging.getLogger(__name__)

THREADS_KEPT = 1000  # incidents whose message is remembered, the latest first
ENDED_KEPT = timedelta(days=1)  # how long a resolved incident's message can still be reopened


@dataclass(frozen=True, slots=True)
class Thread:
    """Where one incident's living message is: the receiver's id of it."""

    key: str  # the incident's root (Notice.key), the same on every replica
    ref: str  # Telegram's message_id, Slack's ts
    incident: str  # the id it was last told under
    posted_at: datetime
    ended_at: datetime | None = None  # told resolved; a reopening edits it again
    # How often the message told it opened: replicas' books may each miss a
    # flap (one was down), the message counts every one it told.
    openings: int = 1

    def dump(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "ref": self.ref,
            "incident": self.incident,
            "posted_at": self.posted_at.isoformat(),
            "ended_at": None if self.ended_at is None else self.ended_at.isoformat(),
            "openings": self.openings,
        }

    @classmethod
    def load(cls, item: Any) -> Thread | None:
        try:
            ended = item["ended_at"]
            thread = cls(
                str(item["key"]),
                str(item["ref"]),
                str(item["incident"]),
                datetime.fromisoformat(item["posted_at"]),
                None if ended is None else datetime.fromisoformat(ended),
                int(item.get("openings", 1)),
            )
        except (KeyError, TypeError, ValueError):
            return None
        return thread if thread.posted_at.tzinfo is not None else None


def edits(transport: Transport) -> EditingTransport | None:
    """``transport`` when it keeps living messages, else None."""
    return transport if isinstance(transport, EditingTransport) and transport.living else None


def _same_incident(thread: Thread, notice: Notice) -> bool:
    """The thread's message is this incident's: the same id, or the incident
    reopened (flapping), which another replica may know by another id."""
    return thread.incident == notice.incident or (
        notice.openings > 1 and thread.ended_at is not None
    )


def deliver(
    transport: EditingTransport, message: Message, threads: dict[str, Thread], now: datetime
) -> str:
    """Post, edit or edit-and-reply, as ``message`` asks; ``threads`` is
    updated with where the incident's message is. Raises TransportError."""
    notice = message.notice
    if notice is None:
        return transport.send(message)
    thread = threads.get(notice.key)
    if thread is None or not _same_incident(thread, notice):
        ref = transport.open(message)
        thread = Thread(notice.key, ref, notice.incident, now, _ended(message, now))
        _keep(threads, replace(thread, openings=notice.openings))
        return f"posted message {ref}"
    reopened = thread.ended_at is not None and message.headline is not Headline.RESOLVED
    openings = max(thread.openings + int(reopened), notice.openings)
    message = replace(message, notice=replace(notice, openings=openings))
    said = f"edited message {thread.ref}"
    try:
        transport.edit(thread.ref, message)
    except TransportError as exc:
        if not exc.gone:
            raise
        ref = transport.open(message)
        said = f"message {thread.ref} cannot be edited any more ({exc}): posted anew as {ref}"
        log.warning("notify %s: %s", transport.channel.name, said)
        thread = replace(thread, ref=ref, posted_at=now)
    threads[notice.key] = replace(
        thread, incident=notice.incident, ended_at=_ended(message, now), openings=openings
    )
    if message.headline in (Headline.WORSE, Headline.RESOLVED) or reopened:
        transport.reply(thread.ref, message)
        said += " and replied in its thread"
    return said


def _ended(message: Message, now: datetime) -> datetime | None:
    return now if message.headline is Headline.RESOLVED else None


def _keep(threads: dict[str, Thread], thread: Thread) -> None:
    threads.pop(thread.key, None)
    threads[thread.key] = thread
    expired = [
        key
        for key, kept in threads.items()
        if kept.ended_at is not None and thread.posted_at - kept.ended_at > ENDED_KEPT
    ]
    for key in expired:
        del threads[key]
    while len(threads) > THREADS_KEPT:
        del threads[next(iter(threads))]

"""Blocking episodes: who blocked whom, after the fact.

An episode is one stretch of time in which sessions waited on one root (the
session at the end of their blocking chains, which waits on nothing), on
locks of any locktype: it begins with the first wait seen on the root and
ends after a quiet gap with none. It carries what a postmortem asks: how
much waiting it caused (waiter-seconds), the most waiters at once, the
root's transaction age and how long it sat idle in transaction, and the
queries involved as fingerprints (``model/fingerprints.py``: never a
constant or a bind value). Episodes are kept on the incident of their root
(``Incident.episodes``), in its history.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

EPISODES_KEPT = 20  # per incident, the latest
FINGERPRINTS_KEPT = 5  # waiters' fingerprints per episode, the most waiters first
RELATIONS_KEPT = 5


@dataclass(frozen=True, slots=True)
class WaiterQueries:
    """The waiters of an episode that ran one query fingerprint."""

    fingerprint: str
    most_at_once: int


@dataclass(frozen=True, slots=True)
class BlockingEpisode:
    """One root's stretch of blocking, as far as lockwatch's polls saw it."""

    pid: int  # the root session
    backend_start: datetime | None
    started_at: datetime  # the earliest start of a wait seen on it (else the first poll's)
    last_seen_at: datetime  # the last poll that saw a session wait on it
    ended: bool  # a quiet gap followed; False: going on (or when its incident ended)
    waiter_seconds: float  # the time sessions spent waiting on it, summed
    max_waiters: int  # the most sessions waiting on it at once
    locktypes: tuple[str, ...]  # what they waited on: advisory, relation, transactionid, ...
    relations: tuple[str, ...]  # the first few relations they waited on
    # The root's open transaction at its oldest, and its longest stretch idle
    # in transaction (None: never seen in a transaction / idle in one).
    blocker_xact_seconds: float | None
    blocker_idle_in_transaction_seconds: float | None
    blocker_fingerprint: str | None  # its query's, last seen; None: hidden or none
    waiter_queries: tuple[WaiterQueries, ...]  # the most waiters first

    @property
    def seconds(self) -> float:
        """How long it went on, from its first wait to the last poll that saw one."""
        return max(0.0, (self.last_seen_at - self.started_at).total_seconds())


def merged_episodes(
    kept: tuple[BlockingEpisode, ...], current: tuple[BlockingEpisode, ...]
) -> tuple[BlockingEpisode, ...]:
    """An incident's episodes with the tracker's ``current`` ones of its root:
    each episode once (the latest word on it, by root and start), oldest
    first, the latest :data:`EPISODES_KEPT`."""
    by_start = {(e.pid, e.backend_start, e.started_at): e for e in (*kept, *current)}
    ordered = sorted(by_start.values(), key=lambda e: (e.started_at, e.pid))
    return tuple(ordered[-EPISODES_KEPT:])

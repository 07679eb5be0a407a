"""The blocking episodes of one target, poll by poll (``model/episodes.py``).

Each poll's waits (advisory and every other locktype) are followed to their
roots; each root with sessions waiting on it has one episode going on, which
adds the time each of its waiters waited since the last poll (or since its
wait began, if later: a wait the server does not date, before PostgreSQL
14, counts from the first poll that saw it), and ends once no session has
waited on the root for ``gap`` seconds. A poll with no wait costs one check.

Episodes are told by the root's incident fingerprint, so the incident book
keeps those of roots that have an incident; a root whose waits never pass a
budget has none, and its episodes are forgotten when they end: routine
short waits (pgbench's) fill no history.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from operator import attrgetter

from lockwatch.model.episodes import (
    FINGERPRINTS_KEPT,
    RELATIONS_KEPT,
    BlockingEpisode,
    WaiterQueries,
)
from lockwatch.model.fingerprints import query_fingerprint
from lockwatch.model.incidents import IncidentRoot, RootKind
from lockwatch.model.locks import Backend, LockSnapshot
from lockwatch.model.remediation import IN_TRANSACTION

LOCKTYPES = 10  # more than PostgreSQL has: every locktype an episode saw

_GRANTED = attrgetter("granted")
# A session as the server names it: pid + backend_start.
_Session = tuple[int, datetime | None]


@dataclass(frozen=True, slots=True)
class _Wait:
    pid: int
    locktype: str
    relation: str | None
    wait_start: datetime | None


@dataclass
class _Going:
    """An episode going on, and what it has seen of its waiters."""

    episode: BlockingEpisode
    queries: dict[str, int] = field(default_factory=dict)  # fingerprint -> most at once
    last_poll: datetime | None = None


def waits_by_root(snapshot: LockSnapshot) -> dict[int, list[_Wait]]:
    """Every wait of the snapshot under the pid at the end of its chain:
    the first blocker's, step by step (a prepared transaction's root is pid
    0). A wait whose chain comes back to it (a deadlock, which the server
    breaks) or whose blockers were not seen is under no root."""
    first: dict[int, int] = {}
    waits: list[_Wait] = []
    for other in snapshot.waits:
        first.setdefault(other.pid, (other.hard or other.soft or (other.pid,))[0])
        waits.append(_Wait(other.pid, other.locktype, other.relation, other.wait_start))
    if _advisory_wait(snapshot):
        holders: dict[tuple[str, object], int] = {}
        for lock in snapshot.locks:
            if lock.granted:
                holders.setdefault((lock.database, lock.key), lock.pid)
        for lock in snapshot.locks:
            holder = holders.get((lock.database, lock.key))
            if not lock.granted and holder is not None and holder != lock.pid:
                first.setdefault(lock.pid, holder)
                waits.append(_Wait(lock.pid, "advisory", None, lock.wait_start))
    by_root: dict[int, list[_Wait]] = {}
    for wait in waits:
        seen, current = {wait.pid}, first[wait.pid]
        while current in first and current not in seen:
            seen.add(current)
            current = first[current]
        if current != wait.pid:  # a wait whose blockers were not seen blocks nobody
            by_root.setdefault(current, []).append(wait)
    return by_root


def root_fingerprint(target: str, session: _Session) -> str:
    """The fingerprint of the incident a session at the root of waits is."""
    pid, backend_start = session
    return IncidentRoot(RootKind.SESSION, target, pid=pid, backend_start=backend_start).fingerprint


class BlockingEpisodes:
    """The episodes going on for one target's roots, and those that ended at
    the last poll."""

    def __init__(self, target: str, gap: float) -> None:
        self.target = target
        self.gap = gap
        self._going: dict[_Session, _Going] = {}

    def observe(self, snapshot: LockSnapshot | None, now: datetime) -> dict[str, BlockingEpisode]:
        """Fold one poll's waits in; the episodes it saw going on or ending,
        by their root's incident fingerprint. ``snapshot`` None: the locks were
        not read, so nothing is known to have changed."""
        if snapshot is None or (not self._going and not _any_wait(snapshot)):
            return {}
        told: dict[str, BlockingEpisode] = {}
        seen: set[_Session] = set()
        for root, waits in waits_by_root(snapshot).items():
            backend = snapshot.backends.get(root)
            if root == 0 or backend is None:
                continue  # a prepared transaction, or a root not seen: no session to name
            session = (root, backend.backend_start)
            seen.add(session)
            going = self._going.get(session)
            if going is None:
                going = self._going[session] = _started(root, backend, waits, now)
            _advance(going, backend, waits, snapshot.backends, now)
            told[root_fingerprint(self.target, session)] = going.episode
        for session in [s for s in self._going if s not in seen]:
            going = self._going[session]
            if (now - going.episode.last_seen_at).total_seconds() >= self.gap:
                del self._going[session]
                ended = replace(going.episode, ended=True)
                told[root_fingerprint(self.target, session)] = ended
        return told


def _any_wait(snapshot: LockSnapshot) -> bool:
    return bool(snapshot.waits) or _advisory_wait(snapshot)


def _advisory_wait(snapshot: LockSnapshot) -> bool:
    # The summary is kept while the locks stay the same: a quiet poll reads
    # one flag; a prepared transaction's lock sets it too, so then look (in C).
    return snapshot.lock_summary().unusual and not all(map(_GRANTED, snapshot.locks))


def _started(root: int, backend: Backend, waits: list[_Wait], now: datetime) -> _Going:
    dated = [w.wait_start for w in waits if w.wait_start is not None]
    episode = BlockingEpisode(
        pid=root,
        backend_start=backend.backend_start,
        started_at=min((*dated, now)),
        last_seen_at=now,
        ended=False,
        waiter_seconds=0.0,
        max_waiters=0,
        locktypes=(),
        relations=(),
        blocker_xact_seconds=None,
        blocker_idle_in_transaction_seconds=None,
        blocker_fingerprint=None,
        waiter_queries=(),
    )
    return _Going(episode)


def _advance(
    going: _Going,
    backend: Backend,
    waits: list[_Wait],
    backends: Mapping[int, Backend],
    now: datetime,
) -> None:
    episode, last = going.episode, going.last_poll
    waited = 0.0
    for wait in waits:
        since = max(filter(None, (wait.wait_start, last)), default=None)
        waited += 0.0 if since is None else max(0.0, (now - since).total_seconds())
    pids = {wait.pid for wait in waits}
    at_once: dict[str, int] = {}
    for pid in pids:
        waiter = backends.get(pid)
        fingerprint = _fingerprint(waiter)
        if fingerprint is not None:
            at_once[fingerprint] = at_once.get(fingerprint, 0) + 1
    for fingerprint, count in at_once.items():
        going.queries[fingerprint] = max(count, going.queries.get(fingerprint, 0))
    queries = sorted(going.queries.items(), key=lambda item: (-item[1], item[0]))
    xact = _age(now, backend.xact_start)
    idle = _age(now, backend.state_change) if backend.state in IN_TRANSACTION else None
    going.episode = replace(
        episode,
        last_seen_at=now,
        waiter_seconds=round(episode.waiter_seconds + waited, 3),
        max_waiters=max(episode.max_waiters, len(pids)),
        locktypes=_joined(episode.locktypes, (w.locktype for w in waits), LOCKTYPES),
        relations=_joined(
            episode.relations, (w.relation for w in waits if w.relation), RELATIONS_KEPT
        ),
        blocker_xact_seconds=_most(episode.blocker_xact_seconds, xact),
        blocker_idle_in_transaction_seconds=_most(
            episode.blocker_idle_in_transaction_seconds, idle
        ),
        blocker_fingerprint=_fingerprint(backend) or episode.blocker_fingerprint,
        waiter_queries=tuple(WaiterQueries(f, n) for f, n in queries[:FINGERPRINTS_KEPT]),
    )
    going.last_poll = now


def _fingerprint(backend: Backend | None) -> str | None:
    if backend is None or not backend.visible:
        return None
    return query_fingerprint(backend.query, backend.query_id)


def _age(now: datetime, since: datetime | None) -> float | None:
    return None if since is None else round(max(0.0, (now - since).total_seconds()), 1)


def _most(before: float | None, now: float | None) -> float | None:
    return now if before is None else before if now is None else max(before, now)


def _joined(kept: tuple[str, ...], more: Iterable[str], limit: int) -> tuple[str, ...]:
    """``kept`` and then what ``more`` adds, each once, at most ``limit``."""
    joined = dict.fromkeys(kept)
    for item in more:
        if len(joined) >= limit:
            break
        joined.setdefault(item, None)
    return tuple(joined)

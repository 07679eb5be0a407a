"""``/api/v1/locks`` and the per-lock view it shares with the metrics and the page."""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lockwatch.model.catalogue import HeldLocks
from lockwatch.model.hold_history import DurationStats, HistoryKey, KeyHistory
from lockwatch.model.locks import AdvisoryLock, Backend, LockKey, LockSnapshot
from lockwatch.model.views import TargetView
from lockwatch.publish.api.encode import _views, json_safe
from lockwatch.settings.locks import LockSettings
from lockwatch.state.board import Board
from lockwatch.text import format_short_duration, iso_utc


def _age(now: datetime, since: datetime | None) -> float | None:
    # Clamped: a server clock slightly ahead of ours must not give negative ages.
    return None if since is None else max(0.0, (now - since).total_seconds())


@dataclass(frozen=True, slots=True)
class LockGroup:
    """Every hold and wait of one key in one database, as of ``now``."""

    database: str
    key: LockKey
    name: str | None  # the configured name, for a named lock
    ignored: bool
    holders: tuple[AdvisoryLock, ...]
    waiters: tuple[AdvisoryLock, ...]
    # From when lockwatch first saw the lock granted (pg_locks has no grant
    # time); None when nobody holds it or no hold time is known.
    hold_seconds: float | None
    longest_wait_seconds: float | None

    @property
    def lock(self) -> str:
        return self.name if self.name is not None else self.key.render()

    @property
    def mode(self) -> str | None:
        rows = self.holders or self.waiters
        return rows[0].mode if rows else None


GroupId = tuple[str, LockKey]  # (database, key)


# Longest-held first, then most waiters, then database and key.
GroupOrder = tuple[float, int, str, bool, int, int]


def _order(group: GroupId, hold_seconds: float | None, waiters: int) -> GroupOrder:
    database, key = group
    return (-(hold_seconds or 0.0), -waiters, database, key.pair, key.first, key.second)


def _rough_order(group: GroupId, locks: list[AdvisoryLock], now: datetime) -> GroupOrder:
    """``_order`` of a group not built yet: cheaper per key than building it."""
    first: datetime | None = None
    waiters = 0
    for lock in locks:
        if not lock.granted:
            waiters += 1
        elif lock.first_seen is not None and (first is None or lock.first_seen < first):
            first = lock.first_seen
    return _order(group, _age(now, first), waiters)


def lock_groups(
    snapshot: LockSnapshot,
    settings: LockSettings,
    now: datetime,
    *,
    top: int | None = None,
    skip: int = 0,
    held: HeldLocks | None = None,
) -> list[LockGroup]:
    """The snapshot's advisory locks grouped per (database, key), longest-held first.

    With ``top``, of the keys neither named nor ignored only the ``top``
    longest-held come back, all the metrics export, and only those are built:
    a scrape of 50,000 locks then costs a sort key per lock, not a group.
    With ``skip``, the first ``skip`` of them are left out unbuilt (a page).
    ``held`` names the locks the queue libraries hold on purpose.
    """
    rows: dict[GroupId, list[AdvisoryLock]] = {}
    for lock in snapshot.locks:
        rows.setdefault((lock.database, lock.key), []).append(lock)
    chosen = list(rows)
    configured = {named.key for named in settings.named} | set(settings.ignore)
    plain = [group for group in chosen if group[1] not in configured]
    if top is not None and len(plain) > top:
        chosen = [group for group in chosen if group[1] in configured]
        chosen += heapq.nsmallest(
            max(top, 0), plain, key=lambda group: _rough_order(group, rows[group], now)
        )
    # The rough order is the groups' own: a page builds only its own keys.
    chosen.sort(key=lambda group: _rough_order(group, rows[group], now))
    groups = []
    for database, key in chosen[skip:]:
        locks = rows[database, key]
        named = settings.named_lock(database, key, held)
        holders = tuple(lock for lock in locks if lock.granted)
        waiters = tuple(lock for lock in locks if not lock.granted)
        holds = [s for s in (_age(now, lock.first_seen) for lock in holders) if s is not None]
        waits = [
            s
            for s in (_age(now, lock.wait_start or lock.first_seen) for lock in waiters)
            if s is not None
        ]
        groups.append(
            LockGroup(
                database=database,
                key=key,
                name=None if named is None else named.name,
                ignored=settings.ignored(database, key),
                holders=holders,
                waiters=waiters,
                hold_seconds=max(holds, default=None),
                longest_wait_seconds=max(waits, default=None),
            )
        )
    groups.sort(key=lambda g: _order((g.database, g.key), g.hold_seconds, len(g.waiters)))
    return groups


def lock_counts(snapshot: LockSnapshot, settings: LockSettings) -> dict[str, tuple[int, int]]:
    """(held, waiting) rows per database, not counting ignored keys."""
    configured = {named.key for named in settings.named} | set(settings.ignore)
    tallies: dict[str, list[int]] = {}
    for lock in snapshot.locks:
        if configured and lock.key in configured and settings.ignored(lock.database, lock.key):
            continue
        tally = tallies.setdefault(lock.database, [0, 0])
        tally[0 if lock.granted else 1] += 1
    return {database: (held, waiting) for database, (held, waiting) in tallies.items()}


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _holder_entry(lock: AdvisoryLock, backend: Backend | None, now: datetime) -> dict[str, Any]:
    return {
        "pid": lock.pid,
        "application_name": None if backend is None else backend.application_name,
        "client_addr": None if backend is None else backend.client_addr,
        "usename": None if backend is None else backend.usename,
        "state": None if backend is None else backend.state,
        "state_seconds": None if backend is None else _seconds(_age(now, backend.state_change)),
        "held_seconds": _seconds(_age(now, lock.first_seen)),
        "query": None if backend is None else backend.query,
    }


def _waiter_entry(lock: AdvisoryLock, backend: Backend | None, now: datetime) -> dict[str, Any]:
    return {
        "pid": lock.pid,
        "application_name": None if backend is None else backend.application_name,
        "client_addr": None if backend is None else backend.client_addr,
        "state": None if backend is None else backend.state,
        "wait_seconds": _seconds(_age(now, lock.wait_start or lock.first_seen)),
        "blocked_by": [] if backend is None else list(backend.blocked_by),
    }


def _durations_entry(stats: DurationStats | None) -> dict[str, Any] | None:
    if stats is None:
        return None
    return {
        "count": stats.count,
        "p50_seconds": _seconds(stats.p50),
        "p90_seconds": _seconds(stats.p90),
        "p99_seconds": _seconds(stats.p99),
        "longest_seconds": _seconds(stats.longest),
        "last_seconds": _seconds(stats.last),
    }


def history_entry(
    history: KeyHistory | None, settings: LockSettings, now: datetime
) -> dict[str, Any] | None:
    """A key's completed holds and waits in brief, and the budget learned from them."""
    if history is None:
        return None
    return {
        "database": history.database,
        "key": None if history.key is None else history.key.render(),
        "since": iso_utc(history.since),
        "holds": _durations_entry(history.holds),
        "waits": _durations_entry(history.waits),
        "learned_budget_seconds": _seconds(settings.learning.budget(history, now)),
        "holder_changes": [iso_utc(moment) for moment in history.holder_changes],
    }


def history_text(entry: dict[str, Any]) -> str:
    """A lock entry's normal, for the page: ``; usually 40ms, p99 800ms over 120 holds``."""
    holds = (entry.get("history") or {}).get("holds")
    if not holds:
        return ""
    p50, p99 = (format_short_duration(holds[q] or 0.0) for q in ("p50_seconds", "p99_seconds"))
    return f"; usually {p50}, p99 {p99} over {holds['count']} holds"


def _lock_entry(
    group: LockGroup,
    snapshot: LockSnapshot,
    now: datetime,
    past: KeyHistory | None,
    settings: LockSettings,
) -> dict[str, Any]:
    backends = snapshot.backends
    return {
        "database": group.database,
        "key": group.key.render(),
        "lock": group.lock,
        "named": group.name is not None,
        "ignored": group.ignored,
        "mode": group.mode,
        "holders": [_holder_entry(h, backends.get(h.pid), now) for h in group.holders],
        "waiters": [_waiter_entry(w, backends.get(w.pid), now) for w in group.waiters],
        "hold_seconds": _seconds(group.hold_seconds),
        "waiter_count": len(group.waiters),
        "longest_wait_seconds": _seconds(group.longest_wait_seconds),
        "history": history_entry(past, settings, now),
    }


@dataclass(frozen=True, slots=True)
class Page:
    """One page of each target's keys, longest-held first: ``limit`` keys from
    the ``offset``-th (``/api/v1/locks?limit=&offset=``)."""

    limit: int
    offset: int = 0


def key_count(snapshot: LockSnapshot) -> int:
    """How many (database, key) the snapshot has rows for."""
    return len({(lock.database, lock.key) for lock in snapshot.locks})


def _target_entry(
    view: TargetView, now: datetime, shown: int | None, page: Page | None
) -> dict[str, Any]:
    status = view.status
    snapshot = None if status is None else status.snapshot
    settings = view.target.locks
    pasts: dict[HistoryKey, KeyHistory] = {
        (h.database, h.key): h for h in view.lock_history if h.key is not None
    }
    entry: dict[str, Any] = {
        "target": view.target.name,
        "up": view.up,
        "error": None if status is None else status.error,
        "checked_at": None if status is None else iso_utc(status.checked_at),
        # Every key with a history, held now or not (named, catalogued, the top N, the rest as one).
        "history": [history_entry(h, settings, now) for h in view.lock_history],
    }
    # Only what is shown is built: a page of 50,000 keys costs a sort key per lock.
    wanted = shown if page is None else page.offset + page.limit
    skip = 0 if page is None else page.offset
    groups = (
        []
        if snapshot is None
        else lock_groups(snapshot, settings, now, top=wanted, skip=skip, held=view.held_locks)
    )
    if shown is not None:
        relevant = [g for g in groups if not g.ignored]
        # Every ignored key is among those built (configured keys always are).
        ignored = len(groups) - len(relevant)
        total = 0 if snapshot is None else key_count(snapshot) - ignored
        groups, entry["locks_left_out"] = relevant[:shown], max(0, total - shown)
    if page is not None:
        total = 0 if snapshot is None else key_count(snapshot)
        groups = groups[: page.limit]
        end = page.offset + len(groups)
        entry["locks_total"] = total
        entry["next_offset"] = end if end < total else None
    entry["locks"] = (
        []
        if snapshot is None
        else [
            _lock_entry(g, snapshot, now, pasts.get((g.database, g.key)), settings) for g in groups
        ]
    )
    return entry


def locks_document(
    views: Board | Iterable[TargetView],
    now: datetime,
    *,
    shown: int | None = None,
    page: Page | None = None,
) -> dict[str, Any]:
    """Every target's advisory locks, longest-held first. With ``shown`` (for
    pages, which must stay small whatever the database holds): only the first
    ``shown`` keys that are not ignored, and how many more in ``locks_left_out``.
    With ``page``: that page of every key, with ``locks_total`` and the
    ``next_offset`` to ask for (None on the last page)."""
    document: dict[str, Any] = json_safe(
        {"targets": [_target_entry(view, now, shown, page) for view in _views(views)]}
    )
    return document

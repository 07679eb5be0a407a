"""``/api/v1/locks`` and the per-lock view it shares with the metrics and the page."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from lockwatch.model.catalogue import HeldLocks
from lockwatch.model.hold_history import DurationStats, HistoryKey, KeyHistory
from lockwatch.model.locks import AdvisoryLock, Backend, KeyRows, LockKey, LockSnapshot
from lockwatch.publish.api.encode import _views, json_safe
from lockwatch.publish.api.lock_tree import lock_tree_entries
from lockwatch.settings.locks import LockSettings
from lockwatch.state.board import Board
from lockwatch.state.target_view import TargetView
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


# Longest-held first, then most waiters, then database and key.
GroupOrder = tuple[float, int, str, LockKey]


def _rows_order(rows: KeyRows, now: datetime) -> GroupOrder:
    """Where a group not built yet is shown: longest held first (a hold
    without a known time as 0 s), then most waiters, then database and key."""
    return (-(_age(now, rows.first_held) or 0.0), -rows.waiters, rows.database, rows.key)


class KeyTable(Protocol):
    """What the publishers read of a poll's locks per key: the poll's
    ``LockTable``, or a quiet target's ``GrantedLocks`` (``publish/metrics``)."""

    @property
    def counts(self) -> Mapping[str, tuple[int, int]]: ...

    def rows(self, key: LockKey) -> tuple[KeyRows, ...]: ...

    def longest_held(self, now: datetime) -> Iterator[KeyRows]: ...


def _chosen(
    table: KeyTable,
    configured: set[LockKey],
    now: datetime,
    top: int | None,
    takes_a_place: Callable[[KeyRows], bool],
) -> list[KeyRows]:
    """Every key longest-held first; with ``top``, the keys configured (named
    or ignored) and only the ``top`` longest-held others that take a place,
    with the ones before them that do not, found without ordering the rest."""
    if top is None:
        return list(table.longest_held(now))
    chosen: list[KeyRows] = []
    places = max(top, 0)
    for rows in table.longest_held(now) if places else ():
        if rows.key in configured:
            continue
        chosen.append(rows)
        places -= takes_a_place(rows)
        if not places:
            break
    chosen += (rows for key in configured for rows in table.rows(key))
    return chosen


def _group(
    rows: KeyRows, settings: LockSettings, now: datetime, held: HeldLocks | None
) -> LockGroup:
    named = settings.named_lock(rows.database, rows.key, held)
    if rows.waiters:
        holders = tuple([lock for lock in rows.locks if lock.granted])
        waiters = tuple([lock for lock in rows.locks if not lock.granted])
        starts = [lock.wait_start or lock.first_seen for lock in waiters]
        longest_wait = _age(now, min([s for s in starts if s is not None], default=None))
    else:  # most keys: held, nobody waiting
        holders, waiters, longest_wait = rows.locks, (), None
    return LockGroup(
        database=rows.database,
        key=rows.key,
        name=None if named is None else named.name,
        ignored=settings.ignored(rows.database, rows.key),
        holders=holders,
        waiters=waiters,
        # The longest hold is the earliest holder's, which the table keeps.
        hold_seconds=_age(now, rows.first_held),
        longest_wait_seconds=longest_wait,
    )


def configured_keys(settings: LockSettings) -> set[LockKey]:
    """The keys the settings name or ignore."""
    return {named.key for named in settings.named} | set(settings.ignore)


def lock_groups(
    snapshot: LockSnapshot,
    settings: LockSettings,
    now: datetime,
    *,
    top: int | None = None,
    skip: int = 0,
    held: HeldLocks | None = None,
    table: KeyTable | None = None,
    unnamed_top: bool = False,
) -> list[LockGroup]:
    """The snapshot's advisory locks grouped per (database, key), longest-held first.

    With ``top``, of the keys neither named nor ignored only the ``top``
    longest-held come back, all the metrics export, and only those are built:
    the snapshot's lock table (made once per poll) has them in order, so a
    scrape of 50,000 locks walks ``top`` keys, not 50,000. With
    ``unnamed_top`` the ``top`` counts only keys without a name (a catalogued
    or held-on-purpose key longer held than them comes back beside them): the
    metrics export the top N unnamed keys, a page lists keys whatever their name.
    With ``skip``, the first ``skip`` of them are left out unbuilt (a page).
    ``held`` names the locks the queue libraries hold on purpose; ``table``
    stands for the snapshot's lock table.
    """
    configured = configured_keys(settings)

    def takes_a_place(rows: KeyRows) -> bool:
        return not unnamed_top or settings.named_lock(rows.database, rows.key, held) is None

    table = snapshot.lock_table() if table is None else table
    chosen = _chosen(table, configured, now, top, takes_a_place)
    if top is not None and configured:
        # The configured keys join the others (already in order) where their order puts them.
        chosen.sort(key=lambda rows: _rows_order(rows, now))
    return [_group(rows, settings, now, held) for rows in chosen[skip:]]


def lock_counts(
    snapshot: LockSnapshot, settings: LockSettings, table: KeyTable | None = None
) -> dict[str, tuple[int, int]]:
    """(held, waiting) rows per database, not counting ignored keys (``table``
    stands for the snapshot's lock table)."""
    table = snapshot.lock_table() if table is None else table
    tallies = {database: list(counts) for database, counts in table.counts.items()}
    for key in configured_keys(settings):
        for rows in table.rows(key):
            if settings.ignored(rows.database, key):
                tallies[rows.database][0] -= len(rows.locks) - rows.waiters
                tallies[rows.database][1] -= rows.waiters
    return {
        database: (held, waiting)
        for database, (held, waiting) in tallies.items()
        if held or waiting
    }


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _holder_entry(lock: AdvisoryLock, backend: Backend | None, now: datetime) -> dict[str, Any]:
    return {
        "pid": lock.pid,
        "application_name": None if backend is None else backend.application_name,
        "client_addr": None if backend is None else backend.client_addr,
        "client_port": None if backend is None else backend.client_port,
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
        "client_port": None if backend is None else backend.client_port,
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
        "learned_budget_seconds": _seconds(settings.learned_budget(history, now)),
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
    the ``offset``-th (``/api/v1/locks?limit=&offset=``), of one target's only
    with ``target`` (``&target=``: the status page links to each target's)."""

    limit: int
    offset: int = 0
    target: str | None = None


def key_count(snapshot: LockSnapshot) -> int:
    """How many (database, key) the snapshot has rows for."""
    return snapshot.lock_table().keys


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
        # Who waits on whom on locks of other locktypes (relations, rows, ...), root first.
        "lock_trees": [] if snapshot is None else lock_tree_entries(snapshot, now),
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
    With ``page``: that page of every key (of ``page.target``'s only, when
    it names one), with ``locks_total`` and the ``next_offset`` to ask for
    (None on the last page)."""
    document: dict[str, Any] = json_safe(
        {
            "targets": [
                _target_entry(view, now, shown, page)
                for view in _views(views)
                if page is None or page.target in (None, view.target.name)
            ]
        }
    )
    return document

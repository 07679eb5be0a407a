"""``lockwatch snapshot``: one look at the advisory locks of a server, as text.

It replaces the hand-written ``pg_locks`` queries of an investigation. One
block per holding session (pid, application, address, state and for how
long, its last query), with its keys counted and the first few listed, and
under it every key others wait for, with its waiters and the blocking chain
behind them; then the problems lockwatch's detectors see, judged with the
config's lock names and budgets. It exits 1 when there is a problem, 0 when
there is none, for cron and scripts, and 3 when it saw none but cannot see
everything: a role without pg_monitor sees nothing of other roles' sessions,
so "no problems" would be a guess.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lockwatch.config import load
from lockwatch.detect.evidence import blocking_chain
from lockwatch.detect.lock_waits import detect_lock_waits
from lockwatch.detect.locks import detect_locks
from lockwatch.model.findings import Finding
from lockwatch.model.lock_waits import LockTreeNode, lock_forest
from lockwatch.model.locks import (
    HIDDEN,
    UNTRACKED_STATE,
    AdvisoryLock,
    Backend,
    LockKey,
    LockSnapshot,
)
from lockwatch.model.views import TargetStatus
from lockwatch.publish.api.findings import findings_document
from lockwatch.publish.api.locks import locks_document
from lockwatch.sample.base import SampleError
from lockwatch.sample.locks import PgLockSampler
from lockwatch.settings.targets import Target
from lockwatch.state.holds import HoldTracker
from lockwatch.state.target_view import TargetView
from lockwatch.text import format_duration, one_line

EXIT_PROBLEM = 1  # a problem seen, or the server could not be read
EXIT_BAD_CONFIG = 2
EXIT_BLIND = 3  # no problem seen, but other roles' sessions are hidden (as doctor's)


def run_snapshot(
    dsn: str | None,
    config_file: Path | None,
    name: str | None,
    limit: int,
    as_json: bool,
    statement_timeout: float,
) -> tuple[int, str, bool]:
    """``lockwatch snapshot``: (exit code, what to print, whether on stderr)."""
    if dsn is None and config_file is None:
        return EXIT_BAD_CONFIG, "lockwatch: give a database (--dsn DSN) or a config file (-c)", True
    try:
        target = snapshot_target(dsn, config_file, name)
        view = take_snapshot(target, statement_timeout=statement_timeout)
    except load.ConfigError as exc:
        return EXIT_BAD_CONFIG, str(exc), True
    except LookupError as exc:
        return EXIT_BAD_CONFIG, f"lockwatch: {exc.args[0]}", True
    except RuntimeError as exc:
        return EXIT_PROBLEM, f"lockwatch: {exc}", True
    found = problems(view)
    if as_json:
        text = json.dumps(snapshot_document(view, found), indent=2)
    else:
        text = render_snapshot(view, found, limit)
    snapshot = None if view.status is None else view.status.snapshot
    blind = snapshot is not None and snapshot.sessions_hidden
    return (EXIT_PROBLEM if found else EXIT_BLIND if blind else 0), text, False


def snapshot_target(dsn: str | None, config_file: Path | None, name: str | None) -> Target:
    """The config's target (``name``, or its first), its DSN replaced by ``dsn``
    if given; or a target of ``dsn`` alone, with the default budgets. Raises
    ConfigError, or LookupError for a target the config does not have."""
    if config_file is None:
        return load.settings_from_flags(dsn=dsn or "").targets[0]
    targets = [t for t in load.load_settings(config_file).targets if name in (None, t.name)]
    if not targets:
        raise LookupError(f"no target {name!r} in {config_file}")
    return targets[0] if dsn is None else replace(targets[0], dsn=dsn)


def snapshot_document(view: TargetView, found: Sequence[Finding]) -> dict[str, Any]:
    """``--json``: the locks as /api/v1/locks has them, and the problems as
    /api/v1/findings."""
    assert view.status is not None
    document = locks_document((view,), view.status.checked_at)
    document["findings"] = findings_document([replace(view, findings=tuple(found))])["findings"]
    return document


def problems(view: TargetView) -> list[Finding]:
    """What lockwatch's lock detectors find in the snapshot, with the target's
    settings (its names, budgets and ignores). Hold times start at first
    sight, as at lockwatch's first poll: an idle holder's at least since its
    session went idle. Waits the server does not date (before PostgreSQL 14)
    are judged by their count alone: one look cannot tell how long they were."""
    snapshot = view.status.snapshot if view.status else None
    if snapshot is None:
        return []
    settings = view.target.locks
    if undated_waits(snapshot):
        settings = replace(settings, convoy_wait=0.0)
    now = snapshot.taken_at
    return [*detect_locks(snapshot, settings, now), *detect_lock_waits(snapshot, settings, now)]


def undated_waits(snapshot: LockSnapshot) -> bool:
    """Whether the snapshot has waiters whose wait began at a time nobody
    knows: ``pg_locks.waitstart`` is PostgreSQL 14's."""
    return any(not lock.granted and lock.wait_start is None for lock in snapshot.locks)


def take_snapshot(target: Target, *, statement_timeout: float) -> TargetView:
    """Sample once. Raises RuntimeError with a secret-free message on failure."""
    sampler = PgLockSampler(
        target.dsn, connect_timeout=target.connect_timeout, statement_timeout=statement_timeout
    )
    try:
        raw = sampler.sample()
    except SampleError as exc:
        raise RuntimeError(str(exc)) from None
    finally:
        sampler.close()
    now = datetime.now(UTC)
    if raw.read_at is not None:  # the server's timestamps, on our clock
        raw = raw.moved(now - raw.read_at)
    locks = HoldTracker(continuity_gap=0).observe(raw.locks, raw.backends, now, raw.read_at)
    # A one-shot look first sees every waiter now: that dates no wait, so a
    # wait the server does not date (no waitstart before 14) stays undated.
    locks = tuple(
        lock if lock.granted or lock.wait_start else replace(lock, first_seen=None)
        for lock in locks
    )
    snapshot = LockSnapshot(
        target.name,
        now,
        raw.server_version,
        locks,
        raw.backends,
        raw.seconds,
        sampler.session.visibility,
        waits=raw.waits,
    )
    return TargetView(
        target, TargetStatus(target.name, now, snapshot), polls_total=1, last_success=now
    )


# Holding sessions shown one by one unless --limit says otherwise; the rest are counted.
HOLDERS_SHOWN = 20
KEYS_LISTED = 8  # keys named per holder; the rest are counted
WAITED_KEYS_SHOWN = 10  # keys with waiters shown per holder

# A holding session: (pid, xid of its prepared transaction or None).
HolderId = tuple[int, int | None]


def _who(backend: Backend | None, pid: int) -> str:
    if backend is None:
        return f"pid {pid} (session gone)"
    return f"pid {pid} {one_line(backend.application_name) or '-'} from {one_line(backend.where)}"


def _state(backend: Backend | None, now: datetime) -> str:
    if backend is not None and not backend.visible:
        return f"state {HIDDEN}"
    if backend is None or backend.state is None:
        return "state unknown"
    if backend.state == UNTRACKED_STATE:
        return "not tracked: track_activities is off"
    text = one_line(backend.state)
    if backend.state_change is not None:
        text += f" for {format_duration((now - backend.state_change).total_seconds())}"
    if backend.waiting_on_lock:
        text += f", waiting on {one_line(backend.wait_event or 'a lock')}"
    return text


def _blind_warning(snapshot: LockSnapshot) -> list[str]:
    """Said first: the role cannot see other roles' sessions."""
    if not snapshot.sessions_hidden or snapshot.visibility is None:
        return []
    role = one_line(snapshot.visibility.role)
    return [
        f"WARNING: role {role} lacks pg_monitor: other roles' sessions are hidden "
        f"(address, state, times, query); GRANT pg_monitor TO {role}"
    ]


def _holder_line(lock: AdvisoryLock, snapshot: LockSnapshot) -> list[str]:
    prepared = lock.prepared
    if prepared is not None:
        age = format_duration(prepared.age_seconds)
        return [
            f"prepared transaction '{one_line(prepared.gid)}' (owner "
            f"{one_line(prepared.owner or '?')}), no session, prepared {age} ago"
        ]
    backend = snapshot.backends.get(lock.pid)
    lines = [f"{_who(backend, lock.pid)}, {_state(backend, snapshot.taken_at)}"]
    if backend is not None and backend.query:
        lines.append(f"  last query: {one_line(backend.query, 120)}")
    return lines


def _title(view: TargetView, database: str, key: LockKey) -> str:
    named = view.target.locks.named_lock(database, key)
    return f"{one_line(named.name)} ({key.render()})" if named else key.render()


def _listed(names: Sequence[str], limit: int) -> str:
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown}, … and {len(names) - limit} more"


def _waiters(
    view: TargetView,
    snapshot: LockSnapshot,
    database: str,
    key: LockKey,
    waiters: list[AdvisoryLock],
) -> list[str]:
    """A key's queue: how many, the longest wait, each waiter, the chain behind the first."""
    now = snapshot.taken_at
    waiters.sort(key=lambda lock: (lock.wait_start or lock.first_seen or now, lock.pid))
    first = waiters[0]
    started = first.wait_start or first.first_seen
    longest = (
        f"longest {format_duration((now - started).total_seconds())}"
        if started is not None
        else "for how long unknown (PostgreSQL before 14 does not date waits)"
    )
    lines = [f"  lock {_title(view, database, key)}: {len(waiters)} session(s) waiting, {longest}:"]
    lines += [
        f"    {_who(snapshot.backends.get(w.pid), w.pid)}, {w.mode}" for w in waiters[:KEYS_LISTED]
    ]
    if len(waiters) > KEYS_LISTED:
        lines.append(f"    … and {len(waiters) - KEYS_LISTED} more")
    chain = blocking_chain(snapshot, first.pid, now)
    if len(chain) > 1:
        steps = " -> ".join(
            f"{step.pid} ({one_line(step.state or '?')}"
            + (f", waits on {one_line(step.wait_event)}" if step.wait_event_type == "Lock" else "")
            + ")"
            for step in chain
        )
        lines.append(f"    chain {steps}")
    return lines


def _holder_block(
    view: TargetView,
    snapshot: LockSnapshot,
    held: list[AdvisoryLock],
    queues: dict[tuple[str, LockKey], list[AdvisoryLock]],
) -> list[str]:
    lines = _holder_line(held[0], snapshot)
    by_database: dict[str, list[AdvisoryLock]] = defaultdict(list)
    for lock in held:
        by_database[lock.database].append(lock)
    for database, locks in sorted(by_database.items()):
        locks.sort(key=lambda lock: (lock.key.pair, lock.key.first, lock.key.second))
        titles = [_title(view, database, lock.key) for lock in locks]
        lines.append(
            f"  holds {len(locks)} key(s) in database {one_line(database)}: "
            f"{_listed(titles, KEYS_LISTED)}"
        )
        contended = [lock for lock in locks if (database, lock.key) in queues]
        for lock in contended[:WAITED_KEYS_SHOWN]:
            lines += _waiters(view, snapshot, database, lock.key, queues[database, lock.key])
        if len(contended) > WAITED_KEYS_SHOWN:
            lines.append(f"  … and {len(contended) - WAITED_KEYS_SHOWN} more keys with waiters")
    return lines


def render_snapshot(
    view: TargetView, problems: Sequence[Finding] = (), limit: int = HOLDERS_SHOWN
) -> str:
    """The snapshot grouped by holding session, the ``limit`` holding the most
    waiters and then the oldest first, and the ``problems`` found in it."""
    status = view.status
    if status is None or status.snapshot is None:
        return f"{view.target.name}: no snapshot ({status.error if status else 'not polled'})"
    snapshot = status.snapshot
    now = snapshot.taken_at
    holders: dict[HolderId, list[AdvisoryLock]] = defaultdict(list)
    queues: dict[tuple[str, LockKey], list[AdvisoryLock]] = defaultdict(list)
    for lock in snapshot.locks:
        if lock.granted:
            holder = (lock.pid, lock.prepared.transaction if lock.prepared else None)
            holders[holder].append(lock)
        else:
            queues[(lock.database, lock.key)].append(lock)
    held = sum(len(locks) for locks in holders.values())
    version = f"{snapshot.server_version // 10000}.{snapshot.server_version % 10000}"
    lines = [
        f"PostgreSQL {version}: {held} advisory lock(s) held by {len(holders)} session(s), "
        f"{len(snapshot.locks) - held} waiting, at {now:%Y-%m-%d %H:%M:%S}Z "
        f"(poll {snapshot.poll_seconds * 1000:.1f} ms)"
    ]
    # First: everything below about other roles' sessions is partial.
    lines[:0] = _blind_warning(snapshot)
    if not snapshot.locks:
        lines.append("no advisory locks held or awaited")

    def rank(locks: list[AdvisoryLock]) -> tuple[int, datetime, int]:
        blocked = sum(len(queues.get((lock.database, lock.key), ())) for lock in locks)
        oldest = min((lock.first_seen or now for lock in locks), default=now)
        return (-blocked, oldest, locks[0].pid)

    ordered = sorted(holders.values(), key=rank)
    for locks in ordered[:limit]:
        lines += ["", *_holder_block(view, snapshot, locks, queues)]
    if len(ordered) > limit:
        rest = ordered[limit:]
        lines += ["", f"… and {len(rest)} more session(s) holding {sum(map(len, rest))} lock(s)"]
    held_keys = {(lock.database, lock.key) for locks in holders.values() for lock in locks}
    orphan_queues = sorted(
        (item for item in queues.items() if item[0] not in held_keys),
        key=lambda item: (item[0][0], item[0][1].pair, item[0][1].first, item[0][1].second),
    )
    if orphan_queues:
        lines += ["", "waiting on keys nobody is seen to hold:"]
        for (database, key), waiters in orphan_queues[:limit]:
            lines += _waiters(view, snapshot, database, key, waiters)
    lines += _tree_lines(snapshot, now, limit * TREE_LINES_PER_HOLDER)
    lines += ["", _problems(problems, limit, snapshot.sessions_hidden)]
    return "\n".join(lines)


TREE_LINES_PER_HOLDER = 5  # lock tree lines per holder shown; the rest are counted


def _tree_lines(snapshot: LockSnapshot, now: datetime, budget: int) -> list[str]:
    """Who waits on whom on relations, rows and transaction ids: each root
    first, its waiters indented under it with the lock they wait for and all
    their blockers."""
    forest = lock_forest(snapshot.waits)
    if not forest:
        return []
    lines = ["", "waits on relations, rows and transactions (root first):"]
    stack: list[tuple[LockTreeNode, int]] = [(tree, 1) for tree in reversed(forest)]
    while stack and len(lines) - 2 < budget:
        node, depth = stack.pop()
        backend = snapshot.backends.get(node.pid)
        text = f"{'  ' * depth}{'└ ' if node.wait else ''}{_who(backend, node.pid)}, {_state(backend, now)}"
        if backend is not None and backend.visible and backend.xact_start is not None:
            text += (
                f", transaction open {format_duration((now - backend.xact_start).total_seconds())}"
            )
        if node.wait is not None:
            wait = node.wait
            what = f"{wait.locktype} {one_line(wait.relation)}" if wait.relation else wait.locktype
            blockers = ",".join(str(pid) for pid in wait.blockers)
            text += f"; wants {wait.mode} on {what} (blocked by {blockers})"
        if backend is not None and backend.visible and backend.query:
            text += f": {one_line(backend.query, 80)}"
        lines.append(text)
        stack.extend((child, depth + 1) for child in reversed(node.waiters))
    left = sum(tree.size for tree in forest) - (len(lines) - 2)
    if left > 0:
        lines.append(f"  … and {left} more session(s) in these trees")
    return lines


def _problems(problems: Sequence[Finding], limit: int, blind: bool = False) -> str:
    if not problems and blind:
        return (
            "no problems seen, but lockwatch cannot see: other roles' sessions are hidden "
            "from this role, so their locks cannot be judged (GRANT pg_monitor)"
        )
    if not problems:
        return "no problems seen"
    lines = [f"{len(problems)} problem(s):"]
    lines += [f"  {f.kind.value} [{f.severity.value}]: {f.summary}" for f in problems[:limit]]
    if len(problems) > limit:
        lines.append(f"  … and {len(problems) - limit} more")
    return "\n".join(lines)

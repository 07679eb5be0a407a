"""Waits on locks of every kind but advisory (relations, rows, transaction
ids, ...): who waits on what, and who blocks each waiter, computed from the
rows of pg_locks with PostgreSQL's own lock conflict table.

A waiter has hard blockers (sessions holding the lock in a mode that
conflicts with the one it asks for) and soft blockers (sessions ahead of it in
the lock's wait queue asking for a conflicting mode: the lock queue an
``ALTER TABLE`` makes every later query wait in), as pg_blocking_pids() names
them, without its cost (it takes every lock-manager partition lock per call,
N^2 pids for a queue of N).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

# The modes of pg_locks.mode, weakest first, and what each conflicts with
# (src/backend/storage/lmgr/lock.c, LockConflicts). SIReadLock (predicate
# locks) conflicts with no heavyweight mode.
MODES = (
    "AccessShareLock",
    "RowShareLock",
    "RowExclusiveLock",
    "ShareUpdateExclusiveLock",
    "ShareLock",
    "ShareRowExclusiveLock",
    "ExclusiveLock",
    "AccessExclusiveLock",
)
_CONFLICTS_BY_LEVEL = {
    1: (8,),
    2: (7, 8),
    3: (5, 6, 7, 8),
    4: (4, 5, 6, 7, 8),
    5: (3, 4, 6, 7, 8),
    6: (3, 4, 5, 6, 7, 8),
    7: (2, 3, 4, 5, 6, 7, 8),
    8: (1, 2, 3, 4, 5, 6, 7, 8),
}
CONFLICTS: Mapping[str, frozenset[str]] = {
    MODES[level - 1]: frozenset(MODES[other - 1] for other in others)
    for level, others in _CONFLICTS_BY_LEVEL.items()
}
# The modes that block ordinary writes (and, AccessExclusiveLock, reads):
# DDL, LOCK TABLE, VACUUM FULL, REINDEX, CREATE INDEX without CONCURRENTLY.
# Waiting for one of them, a session makes every later query on the object
# that conflicts with it queue behind it.
STRONG_MODES = frozenset(MODES[4:])
# The locktypes of a row lock wait: a transaction id (the row's locker) or a
# tuple (the place in line for one row).
ROW_LOCKTYPES = frozenset({"transactionid", "tuple"})


def conflicts(held: str, wanted: str) -> bool:
    """Whether a lock held (or asked for first) in ``held`` blocks ``wanted``.

    >>> conflicts("AccessShareLock", "AccessExclusiveLock")
    True
    >>> conflicts("RowExclusiveLock", "RowExclusiveLock")
    False
    >>> conflicts("SIReadLock", "AccessExclusiveLock")
    False
    """
    return held in CONFLICTS.get(wanted, ())


@dataclass(frozen=True, slots=True)
class PreparedXact:
    """A prepared (two-phase) transaction, a row of ``pg_prepared_xacts``: it
    holds its locks with no session at all, across server restarts, until
    someone runs COMMIT PREPARED or ROLLBACK PREPARED."""

    transaction: int  # its xid
    gid: str
    owner: str | None
    database: str | None
    prepared: datetime  # when it was prepared, by the server's clock
    age_seconds: float  # since then, by the server's clock, as the locks were read


@dataclass(frozen=True, slots=True)
class LockRowFact:
    """One row of pg_locks of a locktype a waiter waits on: its session (pid
    0 for a prepared transaction), the locked object (``tag``: every column
    that names it), the mode held or asked for."""

    pid: int
    locktype: str
    tag: str
    mode: str
    granted: bool
    wait_start: datetime | None = None  # pg_locks.waitstart (14+), else the query's start
    relation: str | None = None  # the relation's name, for a relation, page or tuple lock
    prepared_vxid: str | None = None  # a prepared transaction's (pid 0) virtualtransaction


@dataclass(frozen=True, slots=True)
class LockWait:
    """One session waiting on a lock, and who blocks it."""

    pid: int
    locktype: str
    mode: str  # the mode it asks for
    tag: str
    relation: str | None  # its own, else that of the row it waits for
    wait_start: datetime | None
    hard: tuple[int, ...]  # holders in a conflicting mode
    soft: tuple[int, ...]  # earlier waiters asking for a conflicting mode
    position: int  # its place in the wait queue, 0 first
    # The prepared transaction among its hard blockers (pid 0), when read.
    prepared: PreparedXact | None = None

    @property
    def blockers(self) -> tuple[int, ...]:
        """Every pid it waits for, as pg_blocking_pids() would name them."""
        return tuple(sorted({*self.hard, *self.soft}))

    @property
    def strong(self) -> bool:
        return self.mode in STRONG_MODES


def wait_label(wait: LockWait) -> str:
    """What a wait is on, in words: a row of its relation, the relation
    itself, or the locktype and the object's tag.

    >>> wait = LockWait(7, "transactionid", "ShareLock", "transactionid:731", "jobs", None, (), (), 0)
    >>> wait_label(wait)
    'a row of jobs'
    >>> from dataclasses import replace
    >>> wait_label(replace(wait, locktype="relation", mode="AccessExclusiveLock"))
    'relation jobs'
    >>> wait_label(replace(wait, relation=None))
    'transactionid:731'
    """
    if wait.relation is None:
        return wait.tag
    if wait.locktype in ROW_LOCKTYPES:
        return f"a row of {wait.relation}"
    return f"{wait.locktype} {wait.relation}"


def _queue_order(row: LockRowFact) -> tuple[bool, datetime | None, int]:
    # Undated waits last (a server without waitstart whose session showed no
    # query start); the pid keeps the order total.
    return (row.wait_start is None, row.wait_start, row.pid)


def lock_waits(rows: Iterable[LockRowFact]) -> tuple[LockWait, ...]:
    """Every waiting row of ``rows`` with its hard and soft blockers, the
    queue of each lock in order of its waits' start.

    A session never blocks itself (it may hold a weaker mode of the lock it
    waits to upgrade). A row wait's relation is that of the tuple lock the
    waiter holds or waits for (a transaction id names no relation).
    """
    by_tag: dict[str, list[LockRowFact]] = {}
    tuple_relation: dict[int, str] = {}
    for row in rows:
        by_tag.setdefault(row.tag, []).append(row)
        if row.locktype == "tuple" and row.relation is not None:
            tuple_relation[row.pid] = row.relation
    waits: list[LockWait] = []
    for tag, group in by_tag.items():
        queue = sorted((row for row in group if not row.granted), key=_queue_order)
        if not queue:
            continue
        holders = [row for row in group if row.granted]
        # The waiters ahead by the mode they ask for: a queue of N plain
        # readers behind one ALTER costs N steps, not N^2.
        ahead: dict[str, list[int]] = {}
        for position, wait in enumerate(queue):
            conflicting = CONFLICTS.get(wait.mode, frozenset())
            hard = {h.pid for h in holders if h.pid != wait.pid and h.mode in conflicting}
            soft = {pid for mode in conflicting for pid in ahead.get(mode, ())}
            soft -= hard | {wait.pid}
            ahead.setdefault(wait.mode, []).append(wait.pid)
            relation = wait.relation or tuple_relation.get(wait.pid)
            waits.append(
                LockWait(
                    wait.pid,
                    wait.locktype,
                    wait.mode,
                    tag,
                    relation,
                    wait.wait_start,
                    tuple(sorted(hard)),
                    tuple(sorted(soft)),
                    position,
                )
            )
    return tuple(waits)


def roots_of(waits: Iterable[LockWait]) -> dict[int, int]:
    """Each waiting pid's root: the session at the end of its blocking chain
    that waits on nothing (the first hard blocker's, step by step; a cycle,
    a deadlock the server is about to break, roots at the pid it came back
    to)."""
    blocker_of = {wait.pid: (wait.hard or wait.soft or (wait.pid,))[0] for wait in waits}
    roots: dict[int, int] = {}
    for pid, first in blocker_of.items():
        seen = [pid]
        current = first
        while current in blocker_of and current not in seen:
            seen.append(current)
            current = blocker_of[current]
        roots[pid] = current
    return roots


@dataclass(frozen=True, slots=True)
class LockTreeNode:
    """A session in a lock tree: the wait that puts it under its parent
    (None for a root, which waits on nothing), and who waits on it."""

    pid: int
    wait: LockWait | None
    waiters: tuple[LockTreeNode, ...]
    size: int  # the sessions in its subtree, itself included


def lock_forest(waits: Iterable[LockWait]) -> tuple[LockTreeNode, ...]:
    """The lock trees of ``waits``, the root first: one tree per session that
    blocks others and waits on nothing (or the session a deadlock cycle
    comes back to), the largest tree first. A waiter with several blockers
    sits under the first one met breadth first from its root, and its wait
    names them all (``blocked_by``); under another root it is there again,
    as it waits for that root too."""
    waits = tuple(waits)
    waiting = {wait.pid: wait for wait in waits}
    waiters_of: dict[int, list[LockWait]] = {}
    for wait in sorted(waits, key=_queue_place):
        for blocker in wait.blockers:
            waiters_of.setdefault(blocker, []).append(wait)
    roots = {pid for pid in waiters_of if pid not in waiting}
    roots |= {root for root in roots_of(waits).values() if root in waiting}
    trees = [_tree(root, waiting, waiters_of) for root in roots]
    return tuple(sorted(trees, key=lambda tree: (-tree.size, tree.pid)))


def _queue_place(wait: LockWait) -> tuple[int, bool, datetime | None, int]:
    return (wait.position, wait.wait_start is None, wait.wait_start, wait.pid)


def _tree(
    root: int, waiting: Mapping[int, LockWait], waiters_of: Mapping[int, list[LockWait]]
) -> LockTreeNode:
    """The tree under ``root``, each session once, under the first blocker
    met breadth first (so a long queue makes a wide tree, never a deep one)."""
    children: dict[int, list[int]] = {}
    seen, frontier = {root}, [root]
    while frontier:
        following = []
        for pid in frontier:
            for wait in waiters_of.get(pid, ()):
                if wait.pid not in seen:
                    seen.add(wait.pid)
                    children.setdefault(pid, []).append(wait.pid)
                    following.append(wait.pid)
        frontier = following
    built: dict[int, LockTreeNode] = {}
    for pid in reversed(list(_breadth_first(root, children))):
        under = tuple(built[child] for child in children.get(pid, ()))
        through = None if pid == root else waiting.get(pid)
        built[pid] = LockTreeNode(pid, through, under, 1 + sum(node.size for node in under))
    return built[root]


def _breadth_first(root: int, children: Mapping[int, list[int]]) -> Iterable[int]:
    order = [root]
    for pid in order:
        order.extend(children.get(pid, ()))
    return order

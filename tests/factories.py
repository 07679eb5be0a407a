"""Builders of synthetic lock snapshots, so tests read as sentences:

    snapshot(held(42, 1234, held_for=340), waiting(42, 1301, waited_for=310),
             backends=[backend(1234, "webhook-worker-1", idle_for=330), backend(1301)])

Times are relative to ``NOW`` unless a test passes its own ``now``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from hypothesis import strategies as st

from lockwatch.model.locks import IDLE_STATES, AdvisoryLock, Backend, LockKey, LockSnapshot

NOW = datetime(2025, 3, 14, 21, 40, tzinfo=UTC)
DB = "app"
TARGET = "main"

KeyLike = int | tuple[int, int] | str | LockKey


def ago(seconds: float, now: datetime = NOW) -> datetime:
    return now - timedelta(seconds=seconds)


def key(value: KeyLike) -> LockKey:
    """``42`` and ``"42"`` are bigint keys, ``(7, 13)`` and ``"7,13"`` pairs."""
    if isinstance(value, LockKey):
        return value
    if isinstance(value, tuple):
        return LockKey.int_pair(*value)
    if isinstance(value, str):
        return LockKey.parse(value)
    return LockKey.bigint(value)


def backend(
    pid: int,
    app: str = "worker",
    *,
    addr: str | None = "10.0.0.5",
    user: str = "app",
    database: str = DB,
    state: str | None = "active",
    idle_for: float | None = None,
    state_for: float = 0.0,
    xact_for: float | None = None,
    query: str = "SELECT 1",
    waits_on: Iterable[int] = (),
    connected_for: float = 3600.0,
    now: datetime = NOW,
) -> Backend:
    """A session; ``idle_for`` makes it idle (or ``state``) for that long,
    ``waits_on`` makes it wait on a heavyweight lock held by those pids."""
    blockers = tuple(waits_on)
    if idle_for is not None:
        state = state if state in IDLE_STATES else "idle"
        state_for = idle_for
    return Backend(
        pid=pid,
        backend_start=ago(connected_for, now),
        database=database,
        usename=user,
        application_name=app,
        client_addr=addr,
        state=state,
        state_change=ago(state_for, now),
        xact_start=None if xact_for is None else ago(xact_for, now),
        query_start=ago(state_for, now),
        wait_event_type="Lock" if blockers else None,
        wait_event="advisory" if blockers else None,
        query=query,
        blocked_by=blockers,
    )


def held(
    k: KeyLike,
    pid: int,
    *,
    held_for: float | None = 0.0,
    mode: str = "ExclusiveLock",
    database: str = DB,
    now: datetime = NOW,
) -> AdvisoryLock:
    """A granted lock that lockwatch first saw ``held_for`` seconds ago
    (None: not seen before)."""
    return AdvisoryLock(
        database=database,
        key=key(k),
        mode=mode,
        granted=True,
        pid=pid,
        first_seen=None if held_for is None else ago(held_for, now),
    )


def waiting(
    k: KeyLike,
    pid: int,
    *,
    waited_for: float = 0.0,
    mode: str = "ExclusiveLock",
    database: str = DB,
    wait_start_known: bool = True,
    now: datetime = NOW,
) -> AdvisoryLock:
    """A lock request waiting for ``waited_for`` seconds; without
    ``wait_start_known`` (PostgreSQL < 14) only lockwatch's first sight dates it."""
    started = ago(waited_for, now)
    return AdvisoryLock(
        database=database,
        key=key(k),
        mode=mode,
        granted=False,
        pid=pid,
        wait_start=started if wait_start_known else None,
        first_seen=started,
    )


def snapshot(
    *locks: AdvisoryLock,
    backends: Iterable[Backend] = (),
    now: datetime = NOW,
    target: str = TARGET,
) -> LockSnapshot:
    return LockSnapshot(
        target=target,
        taken_at=now,
        server_version=180001,
        locks=tuple(locks),
        backends={b.pid: b for b in backends},
    )


# --- hypothesis strategies -------------------------------------------------

lock_keys = st.one_of(
    st.builds(LockKey.bigint, st.integers(-(1 << 63), (1 << 63) - 1)),
    st.builds(
        LockKey.int_pair,
        st.integers(-(1 << 31), (1 << 31) - 1),
        st.integers(-(1 << 31), (1 << 31) - 1),
    ),
)

# Hostile client values: line breaks, control characters, quotes, markup.
client_text = st.text(
    alphabet=st.sampled_from(list("ab 1-_'\"<>&\n\r\t\x00\x1b\u2028\u0085é")) | st.characters(),
    max_size=80,
)

STATES = ("active", "idle", "idle in transaction", "idle in transaction (aborted)", None)


@st.composite
def lock_snapshots(
    draw: st.DrawFn,
    *,
    keys: st.SearchStrategy[LockKey] | None = None,
    max_age: float = 100_000.0,
    waiters: bool = True,
    states: tuple[str | None, ...] = STATES,
) -> LockSnapshot:
    """Arbitrary snapshots at ``NOW``: a few keys in one or two databases, each
    held (exclusively or shared) and maybe waited on, by sessions in any state
    with hostile application names and queries, some sessions unseen."""
    key_pool = draw(st.lists(keys or lock_keys, min_size=1, max_size=4, unique=True))
    ages = st.floats(0, max_age, allow_nan=False)
    locks: list[AdvisoryLock] = []
    sessions: list[Backend] = []
    pid = 100
    for k in key_pool:
        database = draw(st.sampled_from((DB, "other")))
        shared = draw(st.booleans())
        holder_count = draw(st.integers(0, 3 if shared else 1))
        waiter_count = draw(st.integers(0, 4)) if waiters else 0
        holder_pids = []
        for _ in range(holder_count):
            pid += 1
            holder_pids.append(pid)
            locks.append(
                held(
                    k,
                    pid,
                    held_for=draw(st.none() | ages),
                    mode="ShareLock" if shared else "ExclusiveLock",
                    database=database,
                )
            )
            if draw(st.integers(0, 9)):
                sessions.append(
                    backend(
                        pid,
                        draw(client_text),
                        addr=draw(st.sampled_from(("10.0.0.5", "192.168.1.4", None))),
                        database=database,
                        state=draw(st.sampled_from(states)),
                        state_for=draw(ages),
                        query=draw(client_text),
                    )
                )
        for _ in range(waiter_count):
            pid += 1
            locks.append(
                waiting(
                    k,
                    pid,
                    waited_for=draw(ages),
                    database=database,
                    wait_start_known=draw(st.booleans()),
                )
            )
            sessions.append(backend(pid, draw(client_text), waits_on=holder_pids))
    return snapshot(*draw(st.permutations(locks)), backends=sessions)

"""What proves how long a lock was held: pg_locks has no grant time, so the
hold tracker (state/holds.py) dates a hold it sees for the first time, tells
a session-level lock from a transaction's, and keeps a hold seen across a gap
only on proof, by these rules."""

from __future__ import annotations

from datetime import datetime, timedelta

from lockwatch.model.locks import IDLE_STATES, AdvisoryLock, Backend

# What is remembered of one hold: its first sighting, the transaction its
# session had open when it was last seen (xact_start; None for none; for a
# session lock, when it was found to be one), and whether it was ever seen
# with no transaction open (a session lock for sure).
Hold = tuple[datetime, datetime | None, bool]


def taken_by(lock: AdvisoryLock, backend: Backend | None, now: datetime) -> datetime:
    """The latest a lock seen for the first time can have been taken.

    An idle session has run no SQL since its state_change, and taking a lock
    takes SQL: it held the lock by then. A lock taken just before lockwatch
    looked is then as old as it is, not a poll interval younger, and a hold
    found after a gap (or at start) keeps what can be proven of its age.
    Anyone else may have taken it just now. A prepared transaction took its
    locks before it was prepared, as long ago as the server says.
    """
    if lock.prepared is not None:
        return now - timedelta(seconds=max(lock.prepared.age_seconds, 0.0))
    if (
        lock.granted
        and backend is not None
        and backend.state in IDLE_STATES
        and backend.state_change is not None
    ):
        return min(now, backend.state_change)
    return now


def unchanged(hold: Hold, backend: Backend | None) -> bool:
    """Whether a lock the sampler saw unchanged is still the same hold: a
    session lock is, a lock that may be a transaction's only while that
    transaction (or its absence) goes on."""
    return hold[2] or (
        backend is not None and backend.xact_start is not None and backend.xact_start == hold[1]
    )


def outside_transaction(
    lock: AdvisoryLock, backend: Backend | None, read_at: datetime | None
) -> bool:
    """Proof that a held lock is session-level: its session had no transaction
    open when the locks were read. Sessions are read after the locks, so the
    session must have been idle since before ``read_at``; without it (a
    synthetic snapshot) its state alone is taken."""
    if not lock.granted or backend is None or backend.xact_start is not None:
        return False
    if backend.state != "idle":
        return False
    return read_at is None or (backend.state_change is not None and backend.state_change <= read_at)


def held_throughout(backend: Backend | None, last_seen: datetime | None) -> bool:
    """Proof that a lock seen before a gap lockwatch did not see through was
    held all along. The same rule holds after a restart and after an outage
    of the target.

    Taking the lock again would have meant running SQL, which moves
    state_change; an idle session unchanged since we last saw it has held
    the lock all along.
    """
    return (
        backend is not None
        and last_seen is not None
        and backend.state in IDLE_STATES
        and backend.state_change is not None
        and backend.state_change <= last_seen
    )

"""``lockwatch snapshot``: one look at the advisory locks of a server, as text.

It replaces the hand-written ``pg_locks`` queries of an investigation: every
key, its holder (pid, application, address, state and for how long), its
waiters and the blocking chain behind them.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

from lockwatch.detect.evidence import blocking_chain
from lockwatch.model.locks import HIDDEN, AdvisoryLock, Backend, LockKey, LockSnapshot
from lockwatch.model.views import TargetStatus, TargetView
from lockwatch.sample.base import SampleError
from lockwatch.sample.locks import PgLockSampler
from lockwatch.settings.targets import Target
from lockwatch.state.holds import HoldTracker
from lockwatch.text import format_duration, one_line


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
    snapshot = LockSnapshot(
        target.name,
        now,
        raw.server_version,
        locks,
        raw.backends,
        raw.seconds,
        sampler.session.visibility,
    )
    return TargetView(
        target, TargetStatus(target.name, now, snapshot), polls_total=1, last_success=now
    )


def _who(backend: Backend | None, pid: int) -> str:
    if backend is None:
        return f"pid {pid} (session gone)"
    return f"pid {pid} {one_line(backend.application_name) or '-'} from {one_line(backend.where)}"


def _state(backend: Backend | None, now: datetime) -> str:
    if backend is not None and not backend.visible:
        return f"state {HIDDEN}"
    if backend is None or backend.state is None:
        return "state unknown"
    text = backend.state
    if backend.state_change is not None:
        text += f" for {format_duration((now - backend.state_change).total_seconds())}"
    if backend.waiting_on_lock:
        text += f", waiting on {backend.wait_event or 'a lock'}"
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


def render_snapshot(view: TargetView) -> str:
    status = view.status
    if status is None or status.snapshot is None:
        return f"{view.target.name}: no snapshot ({status.error if status else 'not polled'})"
    snapshot = status.snapshot
    now = snapshot.taken_at
    groups: dict[tuple[str, LockKey], list[AdvisoryLock]] = defaultdict(list)
    for lock in snapshot.locks:
        groups[(lock.database, lock.key)].append(lock)
    held = sum(1 for lock in snapshot.locks if lock.granted)
    version = f"{snapshot.server_version // 10000}.{snapshot.server_version % 10000}"
    lines = [
        f"PostgreSQL {version}: {held} advisory lock(s) held, "
        f"{len(snapshot.locks) - held} waiting, at {now:%Y-%m-%d %H:%M:%S}Z "
        f"(poll {snapshot.poll_seconds * 1000:.1f} ms)"
    ]
    # First: everything below about other roles' sessions is partial.
    lines[:0] = _blind_warning(snapshot)
    if not groups:
        lines.append("no advisory locks held or awaited")
    for (database, key), locks in sorted(groups.items(), key=lambda item: (item[0][0], item[0][1])):
        named = view.target.locks.named_lock(database, key)
        title = f"{named.name} ({key})" if named else str(key)
        lines.append("")
        lines.append(f"lock {title} in database {one_line(database)}")
        for lock in (lock for lock in locks if lock.granted):
            backend = snapshot.backends.get(lock.pid)
            lines.append(
                f"  held by   {_who(backend, lock.pid)}, {lock.mode}, {_state(backend, now)}"
            )
            if backend is not None and backend.query:
                lines.append(f"            last query: {one_line(backend.query, 120)}")
        waiters = sorted(
            (lock for lock in locks if not lock.granted),
            key=lambda lock: lock.wait_start or lock.first_seen or now,
        )
        if waiters:
            first = waiters[0]
            longest = format_duration(
                (now - (first.wait_start or first.first_seen or now)).total_seconds()
            )
            lines.append(f"  waiting   {len(waiters)} session(s), longest {longest}:")
            for lock in waiters:
                backend = snapshot.backends.get(lock.pid)
                lines.append(f"            {_who(backend, lock.pid)}, {lock.mode}")
            chain = blocking_chain(snapshot, first.pid, now)
            if len(chain) > 1:
                steps = " -> ".join(
                    f"{step.pid} ({step.state or '?'}"
                    + (f", waits on {step.wait_event}" if step.wait_event_type == "Lock" else "")
                    + ")"
                    for step in chain
                )
                lines.append(f"  chain     {steps}")
    return "\n".join(lines)

"""The facts findings carry about sessions: who, doing what, blocked by whom."""

from __future__ import annotations

from datetime import datetime
from typing import TypedDict

from lockwatch.model.evidence import ChainStep
from lockwatch.model.locks import HIDDEN, Backend, LockSnapshot
from lockwatch.text import truncate


def seconds_between(now: datetime, then: datetime | None) -> float:
    """Seconds from ``then`` to ``now``; never negative, 0 when unknown."""
    if then is None:
        return 0.0
    return max(0.0, (now - then).total_seconds())


def age_seconds(now: datetime, then: datetime | None) -> float | None:
    return None if then is None else round(seconds_between(now, then), 1)


class SessionArgs(TypedDict):
    """The fields of ``SessionFacts``, typed, for the families that extend it."""

    pid: int
    application_name: str | None
    client_addr: str | None
    state: str | None
    state_seconds: float | None
    wait_event_type: str | None
    wait_event: str | None
    query: str | None
    blocked_by: tuple[int, ...]
    client_port: int | None
    client_hostname: str | None


def session_args(backend: Backend | None, pid: int, now: datetime) -> SessionArgs:
    """A session as findings show it: who, from where, doing what, for how long."""
    if backend is None or not backend.visible:
        # Not seen: nothing known. Hidden from lockwatch's role: the server shows
        # who it is and hides the rest, which is said rather than taken for a
        # local socket and an unknown state.
        shown = None if backend is None else HIDDEN
        return SessionArgs(
            pid=pid,
            application_name=None if backend is None else backend.application_name,
            client_addr=shown,
            state=shown,
            state_seconds=None,
            wait_event_type=None,
            wait_event=None,
            query=shown,
            blocked_by=(),
            client_port=None,
            client_hostname=None,
        )
    return SessionArgs(
        pid=pid,
        application_name=backend.application_name,
        client_addr=backend.client_addr,
        state=backend.state,
        state_seconds=age_seconds(now, backend.state_change),
        wait_event_type=backend.wait_event_type,
        wait_event=backend.wait_event,
        query=truncate(backend.query),
        blocked_by=tuple(backend.blocked_by),
        client_port=backend.client_port,
        client_hostname=backend.client_hostname,
    )


def blocking_chain(
    snapshot: LockSnapshot, pid: int, now: datetime, max_depth: int = 10
) -> tuple[ChainStep, ...]:
    """Who ``pid`` waits for, who that one waits for, and so on.

    One step per backend, following ``Backend.blocked_by`` (the first blocker
    lockwatch knows, when there are several). A step that leads back to a pid
    already in the chain ends it with ``cycle`` set; at most ``max_depth``
    steps are returned.
    """
    chain: list[ChainStep] = []
    seen: set[int] = set()
    current: int | None = pid
    while current is not None and len(chain) < max_depth:
        backend = snapshot.backends.get(current)
        step = ChainStep(**session_args(backend, current, now), cycle=current in seen)
        chain.append(step)
        if step.cycle or backend is None or not backend.blocked_by:
            break
        seen.add(current)
        known = [p for p in backend.blocked_by if p in snapshot.backends]
        current = (known or list(backend.blocked_by))[0]
    return tuple(chain)

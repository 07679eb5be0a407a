"""``lockwatch terminate``'s judgement, pure: whether the incident's root, as
the actions role sees it now, is still the session (or prepared transaction)
the incident is about, still holding its locks, and whether the role may act
on it; and what acting costs, in words.

Every refusal says which of the things that look alike it is: the session is
gone, its pid went to another session, the role cannot see the session well
enough to tell (no pg_read_all_stats: backend_start is NULL), or the role may
not signal it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from lockwatch.model.actions import ActionKind, Verdict
from lockwatch.model.evidence import HolderFacts, LockEvidence, PreparedFacts
from lockwatch.model.incidents import Incident, RootKind
from lockwatch.model.remediation import client_cost, linked_client, state_cost
from lockwatch.text import iso_utc, one_line

HOLDING = (RootKind.SESSION, RootKind.POOLED_BACKEND)
SEE_GRANT = "GRANT pg_read_all_stats (or pg_monitor) TO the actions role"
SIGNAL_GRANT = "GRANT pg_signal_backend TO the actions role"


@dataclass(frozen=True, slots=True)
class RoleFacts:
    """The actions role: who it is and what it may do and see."""

    role: str
    superuser: bool
    signals: bool  # has the privileges of pg_signal_backend
    sees_all: bool  # has the privileges of pg_read_all_stats


@dataclass(frozen=True, slots=True)
class SessionNow:
    """The session that has the root's pid now. Its times and state are None
    when the actions role may not see them."""

    backend_start: datetime | None
    state: str | None
    usename: str | None
    application_name: str | None
    client_addr: str | None
    xact_seconds: float | None  # its open transaction's age; None without one
    state_seconds: float | None
    same_role: bool  # the actions role has the session's role's privileges
    superuser_session: bool


@dataclass(frozen=True, slots=True)
class PreparedNow:
    """The prepared transaction that has the root's gid now."""

    xid: int
    prepared: datetime
    owner: str
    database: str
    owns: bool  # the actions role is its owner


@dataclass(frozen=True, slots=True, order=True)
class HeldNow:
    lock: str  # ``database/key``, as incidents list them
    waiters: int


@dataclass(frozen=True, slots=True)
class Look:
    """What the actions role sees of the incident's root at this moment."""

    role: RoleFacts
    server: str  # host:port/database it connected to, for the person to check
    session: SessionNow | None = None  # None: no session has the pid (or the root is prepared)
    prepared: PreparedNow | None = None  # None: no prepared transaction has the gid
    held: tuple[HeldNow, ...] = ()


@dataclass(frozen=True, slots=True)
class Judgement:
    verdict: Verdict
    detail: str  # one line: why not, or what it will do


def root_prepared(incident: Incident) -> PreparedFacts | None:
    """The prepared transaction the incident's findings saw at its root."""
    for holder in _root_holders(incident):
        if holder.prepared is not None and holder.prepared.gid == incident.root.gid:
            return holder.prepared
    return None


def _root_holders(incident: Incident) -> Iterable[HolderFacts]:
    root = incident.root
    for finding in incident.findings:
        evidence = finding.evidence
        if isinstance(evidence, LockEvidence):
            for holder in evidence.holders:
                prepared = holder.prepared
                if holder.pid == root.pid or (prepared is not None and prepared.gid == root.gid):
                    yield holder


def incident_locks(incident: Incident) -> frozenset[str]:
    """The locks (``database/key``) lockwatch saw the root hold: the incident's
    list, else those of its findings that name the root as a holder."""
    if incident.locks:
        return frozenset(incident.locks)
    root = incident.root
    return frozenset(
        f"{f.evidence.database}/{f.evidence.key}"
        for f in incident.findings
        if isinstance(f.evidence, LockEvidence)
        and any(
            h.pid == root.pid or (h.prepared is not None and h.prepared.gid == root.gid)
            for h in f.evidence.holders
        )
    )


def fits(incident: Incident, action: ActionKind) -> Judgement | None:
    """A refusal when the incident or its root is not one this action can
    end; None when it may go on to the look."""
    root = incident.root
    if not incident.open:
        ended = f" ({incident.resolution.value})" if incident.resolution else ""
        when = iso_utc(incident.resolved_at) or "-"
        return Judgement(Verdict.RESOLVED, f"the incident was resolved at {when}{ended}")
    if root.kind is RootKind.PREPARED:
        wrong = action is not ActionKind.ROLLBACK_PREPARED
        why = (
            f"its root is the prepared transaction {one_line(root.gid)}, which no session "
            "holds: only --rollback-prepared ends it (its changes are undone)"
        )
    elif root.kind not in HOLDING:
        wrong = True
        why = (
            f"its root is a {root.kind.value}, not a session holding locks: nothing to end; "
            "see its runbook"
        )
    else:
        wrong = action is ActionKind.ROLLBACK_PREPARED
        why = f"its root is pid {root.pid}, not a prepared transaction"
    if wrong:
        return Judgement(Verdict.UNFIT, why)
    if root.kind in HOLDING and root.backend_start is None:
        return Judgement(
            Verdict.HIDDEN,
            f"lockwatch never saw the backend_start of pid {root.pid} (its role lacks "
            "pg_read_all_stats), so the session cannot be told from a later one with its pid",
        )
    return None


def judge(incident: Incident, action: ActionKind, look: Look) -> Judgement:
    """Whether to act on the root as ``look`` sees it now (``fits`` passed):
    the first check that refuses, else what it will do."""
    if incident.root.kind is RootKind.PREPARED:
        return _judge_prepared(incident, look)
    for check in (_still_there, _released, _permitted, _cancellable):
        refusal = check(incident, action, look)
        if refusal is not None:
            return refusal
    root = incident.root
    verb = "cancel the running statement of" if action is ActionKind.CANCEL else "end"
    start = root.backend_start.isoformat() if root.backend_start else "-"
    return Judgement(Verdict.DONE, f"{verb} pid {root.pid}, the session started at {start}")


def _released(incident: Incident, action: ActionKind, look: Look) -> Judgement | None:
    expected = incident_locks(incident)
    if expected and not expected & {held.lock for held in look.held}:
        root = incident.root
        what = (
            f"pid {root.pid}" if root.gid is None else f"prepared transaction {one_line(root.gid)}"
        )
        shown = ", ".join(sorted(expected)[:3])
        return Judgement(
            Verdict.RELEASED, f"{what} goes on but no longer holds the incident's locks ({shown})"
        )
    return None


def _still_there(incident: Incident, action: ActionKind, look: Look) -> Judgement | None:
    """Gone, hidden from this role, or another session with the pid."""
    root, session = incident.root, look.session
    pid = root.pid
    if session is None:
        return Judgement(Verdict.GONE, f"no session has pid {pid} any more: it ended already")
    if session.backend_start is None:
        return Judgement(
            Verdict.HIDDEN,
            f"role {look.role.role} cannot see the backend_start of pid {pid}, so cannot tell "
            f"the incident's session from a later one with its pid: {SEE_GRANT}",
        )
    if session.backend_start != root.backend_start:
        return Judgement(
            Verdict.REUSED,
            f"pid {pid} is another session now: it started at "
            f"{session.backend_start.isoformat()}, the incident's at "
            f"{root.backend_start.isoformat() if root.backend_start else '-'}",
        )
    return None


def _permitted(incident: Incident, action: ActionKind, look: Look) -> Judgement | None:
    session, role, pid = look.session, look.role, incident.root.pid
    assert session is not None  # _still_there passed
    if session.superuser_session and not role.superuser:
        return Judgement(
            Verdict.DENIED, f"pid {pid} is a superuser's session: only a superuser may signal it"
        )
    if not (role.superuser or role.signals or session.same_role):
        return Judgement(
            Verdict.DENIED,
            f"role {role.role} may not signal pid {pid} (role {session.usename or '-'}): "
            f"{SIGNAL_GRANT}",
        )
    return None


def _cancellable(incident: Incident, action: ActionKind, look: Look) -> Judgement | None:
    session = look.session
    if action is ActionKind.CANCEL and session is not None and session.state != "active":
        return Judgement(
            Verdict.UNFIT,
            f"pid {incident.root.pid} runs no statement ({session.state or 'state unknown'}): "
            "a cancel does nothing and its locks stay held; end the session instead "
            "(without --cancel)",
        )
    return None


def _judge_prepared(incident: Incident, look: Look) -> Judgement:
    gid, now, role = incident.root.gid or "", look.prepared, look.role
    if now is None:
        return Judgement(
            Verdict.GONE,
            f"no prepared transaction {one_line(gid)}: it was committed or rolled back",
        )
    seen = root_prepared(incident)
    if seen is not None and (seen.transaction, seen.prepared) != (now.xid, now.prepared):
        return Judgement(
            Verdict.REUSED,
            f"the gid {one_line(gid)} names another prepared transaction now (xid {now.xid}, "
            f"prepared at {now.prepared.isoformat()}; the incident's: xid {seen.transaction})",
        )
    released = _released(incident, ActionKind.ROLLBACK_PREPARED, look)
    if released is not None:
        return released
    if not (role.superuser or now.owns):
        return Judgement(
            Verdict.DENIED,
            f"only its owner ({one_line(now.owner)}) or a superuser may roll back the prepared "
            f"transaction {one_line(gid)}, not role {role.role}",
        )
    return Judgement(Verdict.DONE, f"roll back the prepared transaction {one_line(gid)}")


def _freed(look: Look) -> str:
    waiting = sum(held.waiters for held in look.held)
    locks = f"its {len(look.held)} advisory lock(s) go free" if look.held else "its locks go free"
    return locks + (f" and the {waiting} session(s) waiting on them go on" if waiting else "")


def cost(incident: Incident, action: ActionKind, look: Look) -> str:
    """What acting costs, following the root's state now."""
    if action is ActionKind.ROLLBACK_PREPARED:
        prepared = look.prepared
        by = (
            f" (prepared at {prepared.prepared.isoformat()} by {prepared.owner})"
            if prepared
            else ""
        )
        return (
            f"the prepared transaction's changes are undone{by} and {_freed(look)}; "
            "COMMIT PREPARED instead would keep its work"
        )
    session = look.session
    state = session.state if session is not None else None
    if action is ActionKind.CANCEL:
        return (
            "its running statement is cancelled (an error to its client); inside a transaction "
            "block the transaction is aborted and its transaction-level locks go, but "
            "session-level advisory locks stay held"
        )
    xact = session.xact_seconds if session is not None else None
    pooled = incident.root.kind is RootKind.POOLED_BACKEND
    client = linked_client(incident.findings) if pooled else None
    said = f"{state_cost(state, xact)}; {client_cost(pooled, one_line(client) if client else None)}"
    return f"{said}; {_freed(look)}"

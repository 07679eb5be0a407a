"""What a person did about an incident with ``lockwatch terminate``: the
action, whether it was done or refused and why, and who did it.

``lockwatch terminate`` runs as a person, apart from the daemon; it appends one
``ActionRecord`` per attempt to the target's actions file in the state dir, and
the daemon, which owns the incidents, puts each on the incident's timeline
(``state/actions.py``). Nothing here runs anything.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

from lockwatch.text import one_line


class ActionKind(enum.StrEnum):
    """What ``lockwatch terminate`` does to an incident's root."""

    TERMINATE = "terminate"  # pg_terminate_backend: the session ends, its locks go free
    CANCEL = "cancel"  # pg_cancel_backend: its running statement is cancelled
    ROLLBACK_PREPARED = "rollback_prepared"  # ROLLBACK PREPARED of the prepared transaction


class Verdict(enum.StrEnum):
    """How an attempt ended; each has the exit code ``lockwatch terminate``
    ends with (``EXIT_CODES``), documented in docs/configuration.md."""

    DONE = "done"  # acted, and the root let go (or, for a dry run: would act)
    NOT_FOUND = "not_found"  # no incident has that id
    RESOLVED = "resolved"  # the incident is resolved: nothing to end
    GONE = "gone"  # the session (or prepared transaction) no longer exists
    REUSED = "reused"  # the pid (or gid) now belongs to another session (transaction)
    HIDDEN = "hidden"  # the role cannot see the session's backend_start: it cannot be told apart
    DENIED = (
        "denied"  # the role may not do it (pg_signal_backend, the owner, a superuser's session)
    )
    RELEASED = "released"  # the same session goes on but no longer holds the incident's locks
    UNFIT = "unfit"  # the action does not fit the root (cancel on an idle session, ...)
    UNRECORDED = "unrecorded"  # the action could not be recorded, so it was not done
    FAILED = "failed"  # the database answered with an error, or the root did not go


EXIT_CODES = {
    Verdict.DONE: 0,
    Verdict.FAILED: 1,
    # 2: a bad config or usage, as every command
    Verdict.NOT_FOUND: 3,
    Verdict.RESOLVED: 4,
    Verdict.GONE: 5,
    Verdict.REUSED: 6,
    Verdict.HIDDEN: 7,
    Verdict.DENIED: 8,
    Verdict.RELEASED: 9,
    Verdict.UNFIT: 10,
    Verdict.UNRECORDED: 11,
}


@dataclass(frozen=True, slots=True)
class Actor:
    """Who ran the command: the OS user (and the one sudo was run by), the
    host, and the database role the action used (None: it never connected)."""

    os_user: str
    sudo_user: str | None
    host: str
    db_role: str | None

    def text(self) -> str:
        """
        >>> Actor("root", "alice", "db1", "oncall").text()
        'alice (as root) on db1, role oncall'
        >>> Actor("bob", None, "db1", None).text()
        'bob on db1, not connected'
        """
        who = f"{self.sudo_user} (as {self.os_user})" if self.sudo_user else self.os_user
        role = f"role {self.db_role}" if self.db_role else "not connected"
        return f"{one_line(who, 80)} on {one_line(self.host, 80)}, {one_line(role, 80)}"


@dataclass(frozen=True, slots=True)
class ActionRecord:
    """One attempt (``--yes``) on an incident, done or refused: a line of the
    target's actions file, and an ``action`` event on the incident's timeline."""

    id: str  # unique per attempt
    at: datetime  # when it was decided, UTC
    target: str
    incident: str
    action: ActionKind
    verdict: Verdict
    detail: str  # one line for people: what was done, or why not
    actor: Actor
    pid: int | None = None
    backend_start: datetime | None = None
    gid: str | None = None

    @property
    def done(self) -> bool:
        return self.verdict is Verdict.DONE

    def timeline_detail(self) -> str:
        """The line the incident's timeline shows.

        >>> from datetime import UTC
        >>> record = ActionRecord(
        ...     "1", datetime(2026, 12, 1, tzinfo=UTC), "main", "abc-1", ActionKind.TERMINATE,
        ...     Verdict.REUSED, "pid 7 is another session now", Actor("bob", None, "db1", "oncall"))
        >>> record.timeline_detail()
        'terminate refused (reused): pid 7 is another session now; by bob on db1, role oncall'
        """
        outcome = "done" if self.done else f"refused ({self.verdict.value})"
        if self.verdict is Verdict.FAILED:
            outcome = "failed"
        return one_line(
            f"{self.action.value} {outcome}: {self.detail}; by {self.actor.text()}", 400
        )

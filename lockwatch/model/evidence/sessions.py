"""The sessions findings name: who, from where, doing what, for how long."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True, slots=True)
class SessionFacts:
    """A session as a finding shows it. Everything but ``pid`` and
    ``blocked_by`` is None for a session lockwatch did not see. Of a session
    that lockwatch's role may not see (no pg_monitor), ``client_addr``,
    ``state`` and ``query`` say ``HIDDEN`` and its times are None: the server
    hides them, and neither a local socket nor an unknown state is true."""

    pid: int
    application_name: str | None
    client_addr: str | None  # None: a local socket, or not seen; HIDDEN
    state: str | None
    state_seconds: float | None  # since its last state change
    wait_event_type: str | None
    wait_event: str | None
    query: str | None  # its last query, cut to a bounded length
    blocked_by: tuple[int, ...]  # pids it waits for
    # The client's TCP port: ``ss -tnp 'sport = :PORT'`` on the client's host
    # names its process (the pid above is the server's backend). None: a
    # local socket, or not seen.
    client_port: int | None = field(default=None, kw_only=True)
    # The client's host name, where the server resolves it (log_hostname).
    client_hostname: str | None = field(default=None, kw_only=True)


@dataclass(frozen=True, slots=True)
class PreparedFacts:
    """The prepared (two-phase) transaction holding a lock, with no session:
    it keeps its locks across restarts until COMMIT or ROLLBACK PREPARED."""

    gid: str
    owner: str | None
    database: str | None
    prepared: datetime  # by the server's clock
    transaction: int  # its xid


@dataclass(frozen=True, slots=True)
class PooledHolderFacts:
    """The holder's backend is a pooler's: the session facts beside it are
    then empty, for what PostgreSQL shows of the backend (kept here as the
    ``last_client_*`` facts) belongs to the pool's last client, not to the
    client that took the lock, which is unknown."""

    pool: str | None  # ``database/user`` as the pooler names it; None: not known
    inferred: bool  # seen from PostgreSQL alone (no pooler admin console)
    last_client_application_name: str | None
    last_client_addr: str | None
    last_client_query: str | None
    note: str  # the above in words


@dataclass(frozen=True, slots=True)
class HolderFacts(SessionFacts):
    """A session holding the advisory lock a finding is about (pid 0 and
    ``prepared`` for a prepared transaction)."""

    usename: str | None
    held_seconds: float  # since lockwatch first saw the lock granted to it; 0 when undated
    mode: str
    xact_seconds: float | None  # age of its open transaction; None without one
    prepared: PreparedFacts | None = None
    # With pid, names one session (the server reuses pids); None: not seen.
    backend_start: datetime | None = None
    pooled: PooledHolderFacts | None = None


@dataclass(frozen=True, slots=True)
class LockHolderFacts(SessionFacts):
    """A session holding the advisory lock a stalled queue's workers wait on."""

    held_seconds: float | None  # None: lockwatch has not dated the hold
    worker_group: str | None  # the worker group it belongs to; None: none of the queue's
    backend_start: datetime | None = None  # with pid, names one session; None: not seen


@dataclass(frozen=True, slots=True)
class WaiterFacts:
    """A session waiting for the advisory lock a finding is about."""

    pid: int
    application_name: str | None
    client_addr: str | None
    state: str | None
    wait_seconds: float
    blocked_by: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ChainStep(SessionFacts):
    """One session of a blocking chain: the one before it waits for it."""

    cycle: bool  # its pid came earlier in the chain, which ends here


class FindingFacts:
    """What every evidence family answers, whatever its facts."""

    __slots__ = ()

    @property
    def named_holders(self) -> tuple[HolderFacts | LockHolderFacts, ...]:
        """The sessions the finding names as holders, the one it blames first."""
        return ()

"""pgbouncer's admin console as one poll saw it: pools, server and client connections."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

# Pool modes in which a server connection is handed out per transaction or
# statement, so session state (advisory locks included) belongs to no client.
SHARED_POOL_MODES = frozenset({"transaction", "statement"})


@dataclass(frozen=True, slots=True)
class PoolerConnection:
    """One row of SHOW SERVERS or SHOW CLIENTS."""

    ptr: str
    link: str  # ptr of the peer it is paired with right now; "" when none
    database: str
    user: str
    state: str
    addr: str | None
    port: int | None
    local_addr: str | None
    local_port: int | None
    connect_time: str | None
    request_time: str | None
    application_name: str | None
    remote_pid: int | None = None  # servers: the backend's pid


@dataclass(frozen=True, slots=True)
class PoolerSnapshot:
    taken_at: datetime
    pool_modes: Mapping[tuple[str, str], str]  # (database, user) -> pool mode
    servers: tuple[PoolerConnection, ...]
    clients: tuple[PoolerConnection, ...]

    def server_for(self, pid: int, client_port: int | None) -> PoolerConnection | None:
        """The server connection whose backend is ``pid``.

        The port check tells apart equal pids on two servers behind one pooler:
        the backend's client port is the pooler's local port of that connection.
        """
        for server in self.servers:
            if server.remote_pid == pid and (
                client_port is None or server.local_port in (None, client_port)
            ):
                return server
        return None

    def client_linked_to(self, server: PoolerConnection) -> PoolerConnection | None:
        if not server.link:
            return None
        return next((client for client in self.clients if client.ptr == server.link), None)

    def pool_mode(self, server: PoolerConnection) -> str | None:
        return self.pool_modes.get((server.database, server.user))


@dataclass(frozen=True, slots=True)
class PooledBackend:
    """A server backend a pooler hands out per transaction. What PostgreSQL
    shows of it (application_name, client_addr, its last query) is the pool's
    last client's, not its lock holder's: the client that took a session lock
    on it is unknown."""

    pool: str | None  # ``database/user`` as the pooler names it; None: not known
    inferred: bool  # from PostgreSQL's view alone, without a pooler's admin console
    # False: it may be a pooler's, or a client's own; nobody can tell (no
    # console, clients that may come through a pooler). Its client is unknown
    # either way, and it is never judged pooled.
    known: bool = True


# What lockwatch's own session does differently when it runs through a
# transaction pooler (see sample/session.py): a setting made or a statement
# prepared on one server backend would stay there for other clients, and the
# next statement may run on another backend.
POOLED_SESSION_LOSSES = (
    "it prepares no statement on the server (each poll plans its queries again)",
    "each step runs in a transaction of its own, with statement_timeout, lock_timeout, "
    "work_mem and read-only set for that transaction alone (three more round trips for each)",
)


@dataclass(frozen=True, slots=True)
class SessionPooling:
    """lockwatch's own session to a target goes through a pooler that hands out
    server connections per transaction: seen once, when the session was opened."""

    since: datetime
    evidence: str  # how it was seen, free of secrets
    where: str  # the DSN as user@host:port/dbname

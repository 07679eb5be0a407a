"""The evidence of ``lock_pooled_session``: the lock's, and pgbouncer's view of
the server connection that holds it."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from lockwatch.model.evidence.locks import LockEvidence


@dataclass(frozen=True, slots=True)
class PoolFacts:
    database: str
    user: str
    pool_mode: str | None  # None: SHOW POOLS did not list the pool


@dataclass(frozen=True, slots=True)
class ServerConnectionFacts:
    """A row of SHOW SERVERS; the times as pgbouncer shows them."""

    backend_pid: int | None
    state: str
    pooler_port: int | None  # pgbouncer's end of the connection
    connect_time: str | None
    request_time: str | None


@dataclass(frozen=True, slots=True)
class LinkedClientFacts:
    """The row of SHOW CLIENTS the server connection serves right now."""

    addr: str | None  # None: a local socket
    port: int | None
    application_name: str | None
    state: str
    connect_time: str | None


# How sure a lock_pooled_session is: pgbouncer's word, or one backend's own history.
KNOWN_POOLED = "certain: pgbouncer's SHOW SERVERS lists the backend in a shared pool"
INFERRED_POOLED = (
    "likely, not certain: told from this backend's own history without a pooler's "
    "admin console (a direct client that renames itself looks the same)"
)


@dataclass(frozen=True, slots=True)
class PooledLockEvidence(LockEvidence):
    pool: PoolFacts | None  # None: inferred, no pooler console was read
    server_connection: ServerConnectionFacts | None
    linked_client: LinkedClientFacts | None  # None: no client is served by it now
    # How the backend was found pooled from PostgreSQL's view alone (a pooler
    # without an admin console); None: from pgbouncer's SHOW SERVERS.
    inferred: str | None = field(default=None, kw_only=True)
    # How sure lockwatch is that the backend is pooled, in words.
    certainty: str = field(default=KNOWN_POOLED, kw_only=True)

    @classmethod
    def of(
        cls,
        lock: LockEvidence,
        pool: PoolFacts | None,
        server_connection: ServerConnectionFacts | None,
        linked_client: LinkedClientFacts | None,
        inferred: str | None = None,
    ) -> PooledLockEvidence:
        """The lock's evidence, with pgbouncer's facts about the connection
        holding it, or how it was inferred pooled."""
        return cls(
            **{each.name: getattr(lock, each.name) for each in fields(LockEvidence)},
            pool=pool,
            server_connection=server_connection,
            linked_client=linked_client,
            inferred=inferred,
            certainty=KNOWN_POOLED if inferred is None else INFERRED_POOLED,
        )

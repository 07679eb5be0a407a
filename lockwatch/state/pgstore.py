"""The one connection each user of lockwatch's own PostgreSQL store keeps
(`pings.dsn`: the pinged runs, the resolved incidents, the notifier's lease
and outbox): opened on first use with its tables made, closed on any error and
opened again by the next call, so a store that went away comes back by itself.
Its errors come out as :class:`StoreError`, in words that hold no secret."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lockwatch.util.secrets import describe_dsn, dsn_secrets, first_line, redact

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql


class StoreError(Exception):
    """The store could not be read or written; the message holds no secret."""


class StoreConnection:
    """Runs one statement at a time, autocommit; not thread-safe (its owner
    holds the lock). Statements name their tables as ``{name}`` placeholders,
    filled from ``names`` as identifiers."""

    def __init__(
        self,
        dsn: str,
        what: str,
        names: Mapping[str, str],
        schema: Sequence[str],
        **connect: Any,
    ) -> None:
        # psycopg here, not at the top: the commands that read the incident
        # history from a file (``lockwatch incidents``) start without it (issue 32).
        from psycopg import sql

        self._dsn = dsn
        self._secrets = dsn_secrets(dsn)
        self._what = what  # the store's part, as errors name it
        self._names = {key: sql.Identifier(name) for key, name in names.items()}
        self._schema = schema  # CREATE ... IF NOT EXISTS, run on each new connection
        self._connect = {"autocommit": True, "connect_timeout": 5, **connect}
        self._conn: psycopg.Connection[Any] | None = None

    def run(self, query: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        import psycopg

        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self._dsn, **self._connect)
                for statement in self._schema:
                    self._conn.execute(self._compose(statement))
            cursor = self._conn.execute(self._compose(query), dict(params))
            return list(cursor.fetchall()) if cursor.description else []
        except psycopg.Error as exc:
            self.close()
            message = f"{self._what} {describe_dsn(self._dsn)}: {first_line(exc)}"
            raise StoreError(redact(message, self._secrets)) from None

    def _compose(self, statement: str) -> sql.Composed:
        from psycopg import sql

        return sql.SQL(statement).format(**self._names)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None

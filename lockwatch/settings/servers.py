"""Which targets of a config read one PostgreSQL server, as far as the config
can tell: the same host and port (``localhost``, ``127.0.0.1``, ``::1`` and a
local socket as one). The daemon confirms it when they connect, by the
server's ``system_identifier`` (model/servers.py), which also catches two
names of one server the config cannot tell apart, and tells apart what a
pooler in front routes to different servers."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

import psycopg
import psycopg.conninfo

from lockwatch.settings.targets import Target

LOOPBACK = "loopback"


def _host(host: str) -> str:
    """
    >>> _host("LOCALHOST"), _host("127.0.0.2"), _host("::1"), _host(""), _host("db.example")
    ('loopback', 'loopback', 'loopback', 'loopback', 'db.example')
    """
    host = host.strip().lower().strip("[]")
    if host in ("", "localhost") or host.startswith("/"):
        return LOOPBACK
    try:
        return LOOPBACK if ipaddress.ip_address(host).is_loopback else host
    except ValueError:
        return host


def server_and_database(dsn: str) -> tuple[str, str | None]:
    """The server a DSN names, as host:port (the loopback names as one), and
    its database (None when it names none: the server then takes the user's
    name, or the client's defaults).

    >>> server_and_database("postgresql://u@localhost/app")
    ('loopback:5432', 'app')
    >>> server_and_database("host=db port=6432")
    ('db:6432', None)
    """
    try:
        parts = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return dsn, None
    database = parts.get("dbname")
    address = f"{_host(str(parts.get('host') or ''))}:{parts.get('port') or 5432}"
    return address, None if database is None else str(database)


def server_address(dsn: str) -> str:
    """
    >>> server_address("postgresql://u@localhost/app") == server_address("host=127.0.0.1 port=5432")
    True
    """
    return server_and_database(dsn)[0]


def dsn_database(dsn: str) -> str | None:
    return server_and_database(dsn)[1]


def servers_shared(targets: Sequence[Target]) -> list[tuple[str, tuple[Target, ...]]]:
    """The servers (host:port) more than one target reads, with those targets
    in the config's order."""
    by_address: dict[str, list[Target]] = {}
    for target in targets:
        by_address.setdefault(server_address(target.dsn), []).append(target)
    return [(address, tuple(group)) for address, group in by_address.items() if len(group) > 1]


def _database(target: Target) -> str:
    return dsn_database(target.dsn) or "(the role's default)"


def server_notes(targets: Sequence[Target]) -> list[str]:
    """What check-config says of targets that share a server: who judges the
    advisory locks of which database, once."""
    notes = []
    for address, group in servers_shared(targets):
        first, names = group[0], ", ".join(t.name for t in group)
        judged: dict[str, str] = {}
        for target in group:
            judged.setdefault(_database(target), target.name)
        parts = [f"{name} judges database {db}" for db, name in judged.items()]
        notes.append(
            f"targets {names} read one server ({address}): its advisory locks are judged "
            f"and told once, each by the target of its database ({'; '.join(parts)}), and "
            f"those of every other database by {first.name}, the first; queues and jobs "
            "stay each target's. lockwatch confirms they are one server when they connect "
            "(pg_control_system()'s system_identifier), and recognises two names of one "
            "server the same way"
        )
        for target in group:
            if judged[_database(target)] != target.name:
                notes.append(
                    f"targets {judged[_database(target)]} and {target.name} both read database "
                    f"{_database(target)} of {address}: each judges its advisory locks, so each "
                    "is told twice; remove one unless that is what you want"
                )
    return notes

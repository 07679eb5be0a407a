"""Targets that read one server judge its advisory locks once between them:
each its own database, the first one also every database nobody names."""

from __future__ import annotations

import doctest
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from lockwatch.model import servers
from lockwatch.model.servers import (
    WHOLE_SERVER,
    LockScope,
    ScopeKind,
    ServerIdentity,
    ServerPlace,
    lock_scope,
)
from lockwatch.settings import servers as server_settings
from lockwatch.settings.servers import server_notes
from lockwatch.settings.targets import Target

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def identity(system: int | None, database: str, started: datetime = T0) -> ServerIdentity:
    return ServerIdentity(system, started, started + timedelta(hours=1), database)


def place(
    name: str, database: str, system: int | None = 1, address: str = "db:5432"
) -> ServerPlace:
    return ServerPlace(name, address, database, identity(system, database))


def covered(scope: LockScope, own: str, every: set[str]) -> set[str]:
    """The databases a scope reads on a server with ``every`` database."""
    if scope.kind is ScopeKind.WHOLE:
        return set(every)
    if scope.kind is ScopeKind.EXCEPT:
        return every - set(scope.skipped)
    return {own} if scope.kind is ScopeKind.OWN else set()


def test_the_doctests_hold() -> None:
    assert doctest.testmod(servers).failed == 0
    assert doctest.testmod(server_settings).failed == 0


def test_a_target_alone_on_its_server_judges_every_database_of_it() -> None:
    app = place("app", "app")
    other = place("other", "app", system=2)
    assert lock_scope([app, other], app) == WHOLE_SERVER


def test_two_databases_of_one_server_are_judged_once_each_and_the_rest_by_the_first() -> None:
    app, app2 = place("app", "app"), place("app2", "app2", address="127.0.0.1:5432")
    assert lock_scope([app, app2], app) == LockScope(ScopeKind.EXCEPT, (("app2", "app2"),))
    assert lock_scope([app, app2], app2) == LockScope(ScopeKind.OWN, judge="app")


def test_two_targets_of_one_database_each_judge_it_as_configured() -> None:
    first, second = place("first", "app"), place("second", "app")
    assert lock_scope([first, second], first) == WHOLE_SERVER
    assert lock_scope([first, second], second) == LockScope(ScopeKind.OWN, judge="first")


def test_a_replica_shares_its_primarys_identifier_but_not_its_start_and_is_another_server() -> None:
    primary = place("primary", "app")
    replica = ServerPlace(
        "replica", "replica:5432", "app", identity(1, "app", T0 + timedelta(minutes=5))
    )
    assert lock_scope([primary, replica], primary) == WHOLE_SERVER
    assert lock_scope([primary, replica], replica) == WHOLE_SERVER


def test_a_restart_seen_by_one_target_first_keeps_the_other_counted_as_the_same_server() -> None:
    before = ServerIdentity(1, T0, T0 + timedelta(minutes=1), "app2")
    app2 = ServerPlace("app2", "db:5432", "app2", before)
    restarted = ServerPlace("app", "db:5432", "app", identity(1, "app", T0 + timedelta(hours=2)))
    assert lock_scope([restarted, app2], restarted).skipped == ("app2",)


def test_a_target_not_yet_connected_at_the_same_address_is_left_its_database() -> None:
    app = place("app", "app")
    pending = ServerPlace("app2", "db:5432", "app2")
    failed = ServerPlace("app3", "db:5432", "app3", failed=True)
    assert lock_scope([app, pending, failed], app).skipped == ("app2",)
    # ... and, listed first, keeps the rest of the server until it has connected.
    assert lock_scope([pending, app], app) == LockScope(ScopeKind.OWN, judge="app2")


def test_without_the_identifier_the_address_tells_the_server() -> None:
    app = place("app", "app", system=None)
    app2 = place("app2", "app2", system=None)
    elsewhere = place("x", "x", system=None, address="other:5432")
    assert lock_scope([app, app2, elsewhere], app).skipped == ("app2",)
    assert lock_scope([app, app2, elsewhere], elsewhere) == WHOLE_SERVER


_SERVERS = {1: {"a", "b", "c"}, 2: {"a", "d"}}


@given(
    st.lists(
        st.tuples(st.sampled_from(sorted(_SERVERS)), st.sampled_from("abcd"), st.booleans()),
        min_size=1,
        max_size=8,
    )
)
def test_every_database_of_every_server_is_judged_once_unless_named_twice(
    targets: list[tuple[int, str, bool]],
) -> None:
    """With every target connected, each database of a watched server is read
    by the targets that name it, or (named by none) by the server's first
    target alone; with some not yet connected, never by one more."""
    places = [
        ServerPlace(f"t{i}", f"s{system}:5432", database, identity(system, database))
        if connected
        else ServerPlace(f"t{i}", f"s{system}:5432", database)
        for i, (system, database, connected) in enumerate(targets)
        if database in _SERVERS[system]
    ]
    for system, databases in _SERVERS.items():
        here = [p for p in places if p.address == f"s{system}:5432" and p.identity is not None]
        readers = {p.name: covered(lock_scope(places, p), str(p.database), databases) for p in here}
        named = {p.name for p in here if p.database}
        for database in databases:
            judges = {name for name, read in readers.items() if database in read}
            naming = {p.name for p in here if p.database == database}
            assert judges <= (naming or {p.name for p in here}), (database, judges)
            assert len(judges) <= max(1, len(naming)), (database, judges)
            if here and len(here) == len([p for p in places if p.address == f"s{system}:5432"]):
                assert judges == (naming or {here[0].name}), (database, readers, named)


def test_check_config_says_which_target_judges_which_database_of_a_shared_server() -> None:
    targets = [
        Target(name="app", dsn="postgresql://lw@localhost:5432/app"),
        Target(name="app2", dsn="postgresql://lw@127.0.0.1/app2"),
        Target(name="again", dsn="host=::1 dbname=app2 user=lw"),
        Target(name="elsewhere", dsn="postgresql://lw@db2/app"),
    ]
    first, duplicate = server_notes(targets)
    assert first.startswith("targets app, app2, again read one server (loopback:5432)")
    assert "app judges database app; app2 judges database app2" in first
    assert "those of every other database by app, the first" in first
    assert "system_identifier" in first
    assert duplicate.startswith("targets app2 and again both read database app2")
    assert "each judges its advisory locks, so each is told twice" in duplicate
    assert server_notes(targets[3:]) == []

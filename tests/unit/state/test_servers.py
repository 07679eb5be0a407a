"""The daemon's map of servers: each target's session takes a seat, says
where it connected, and asks which databases' locks it reads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from lockwatch.model.servers import WHOLE_SERVER, LockScope, ScopeKind, ServerIdentity
from lockwatch.settings.targets import Target
from lockwatch.state.servers import ServerMap

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
APP = Target(name="app", dsn="postgresql://lw@db:5432/app")
APP2 = Target(name="app2", dsn="postgresql://lw@db:5432/app2")


def reached(database: str, started: datetime = T0) -> ServerIdentity:
    return ServerIdentity(7, started, started + timedelta(seconds=1), database)


def test_the_first_target_leaves_the_second_its_database_from_the_first_poll() -> None:
    servers = ServerMap([APP, APP2])
    app = servers.seat("app")
    app.connected(reached("app"))
    # app2 has not connected yet: its database is left to it all the same.
    assert app.scope(None) == LockScope(ScopeKind.EXCEPT, (("app2", "app2"),))
    app2 = servers.seat("app2")
    app2.connected(reached("app2"))
    assert app2.scope(None) == LockScope(ScopeKind.OWN, judge="app")


def test_a_target_that_never_connected_leaves_the_whole_server_to_the_one_that_did() -> None:
    servers = ServerMap([APP2, APP])
    app = servers.seat("app")
    app.connected(reached("app"))
    assert app.scope(None).kind is ScopeKind.OWN
    servers.seat("app2").failed()
    assert app.scope(None) == WHOLE_SERVER


def test_a_reload_keeps_where_a_target_connected_and_follows_the_new_order() -> None:
    servers = ServerMap([APP, APP2])
    for name in ("app", "app2"):
        servers.seat(name).connected(reached(name))
    servers.arrange([APP2, APP])
    assert servers.seat("app").scope(None) == LockScope(ScopeKind.OWN, judge="app2")


def test_a_new_scope_is_said_once_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    servers = ServerMap([APP, APP2])
    app = servers.seat("app")
    app.connected(reached("app"))
    caplog.set_level("INFO", logger="lockwatch.state.servers")
    for _ in range(3):
        app.scope(None)
    assert [r.getMessage() for r in caplog.records] == [
        "app: judges the advisory locks of database app and every database no other "
        "target of its server names (target app2 judges app2)"
    ]


def test_a_target_seen_up_after_the_others_restart_is_another_server_again() -> None:
    """A replica shares its primary's identifier: once its server is seen up
    after the other one started, the two are two servers."""
    servers = ServerMap([APP, Target(name="replica", dsn="postgresql://lw@replica/app2")])
    app, replica = servers.seat("app"), servers.seat("replica")
    app.connected(reached("app"))
    replica.connected(reached("app2", T0 + timedelta(minutes=5)))
    assert app.scope(None).kind is ScopeKind.EXCEPT  # not known apart yet
    app.scope(T0 + timedelta(minutes=10))
    assert app.scope(None) == WHOLE_SERVER

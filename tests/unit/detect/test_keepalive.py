"""How long an orphan lives: the estimate from a server's (and a pooler's) settings."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lockwatch.detect.keepalive import describe, orphan_lifetime, timeouts_for
from lockwatch.detect.locks import detect_locks
from lockwatch.model.evidence import LockEvidence
from lockwatch.model.findings import Finding, FindingKind
from lockwatch.model.keepalive import (
    LINUX_KEEPALIVE,
    PoolerTimeouts,
    RoleSetting,
    ServerSettings,
    ServerTimeouts,
)
from lockwatch.model.locks import LockSnapshot
from lockwatch.model.pooler import PoolerSnapshot
from lockwatch.settings.locks import LockSettings
from tests.fixtures.evidence import evidence_as
from tests.fixtures.snapshots import NOW, ago, backend, held, snapshot
from tests.unit.detect.test_pooler import BACKEND_PID, pooled_backend, pooler


def server(**settings: float | int | None) -> ServerTimeouts:
    values: dict[str, float | int | None] = {
        "tcp_keepalives_idle": None,
        "tcp_keepalives_interval": None,
        "tcp_keepalives_count": None,
        "idle_session_timeout": None,
        "idle_in_transaction_session_timeout": None,
        "client_connection_check_interval": None,
    }
    values.update(settings)
    return ServerTimeouts(16, **values)  # type: ignore[arg-type]


def test_linux_defaults_keep_an_orphan_about_two_hours_eleven_minutes() -> None:
    lifetime = orphan_lifetime(server())
    idle, interval, count = LINUX_KEEPALIVE
    assert lifetime.idle_seconds == idle + interval * count == 7875
    assert describe(lifetime).startswith("up to 2h11m, ended by TCP keepalive")
    assert len(lifetime.assumed) == 3, "none of the three keepalive settings was read"
    assert any(advice.startswith("tcp_keepalives_idle = 60") for advice in lifetime.shorten)


def test_idle_session_timeout_ends_an_idle_orphan_first_but_not_one_in_a_transaction() -> None:
    lifetime = orphan_lifetime(server(idle_session_timeout=600.0))
    assert lifetime.idle_seconds == 600
    assert lifetime.idle_bound_by == "idle_session_timeout"
    assert lifetime.in_transaction_seconds == 7875
    assert describe(lifetime).startswith("idle: up to 10m, ended by idle_session_timeout;")


def test_short_keepalives_read_from_the_server_need_no_advice_about_them() -> None:
    lifetime = orphan_lifetime(
        server(tcp_keepalives_idle=60.0, tcp_keepalives_interval=10.0, tcp_keepalives_count=3)
    )
    assert lifetime.idle_seconds == 90
    assert lifetime.assumed == ()
    assert not any("tcp_keepalives" in advice for advice in lifetime.shorten)


def test_before_14_there_is_no_idle_session_timeout_to_suggest() -> None:
    old = ServerTimeouts(12, None, None, None, None, None, None)
    assert not any("idle_session_timeout" in advice for advice in orphan_lifetime(old).shorten)


def test_behind_a_busy_transaction_pool_only_server_lifetime_retires_the_backend() -> None:
    pool = PoolerTimeouts(
        server_lifetime=3600.0, server_idle_timeout=600.0, pool_mode="transaction"
    )
    lifetime = orphan_lifetime(server(idle_session_timeout=60.0), pool)
    assert (lifetime.idle_seconds, lifetime.idle_bound_by) == (
        3600,
        "pgbouncer's server_lifetime (on a quiet pool sooner: server_idle_timeout 10m)",
    )


def test_behind_a_transaction_pool_without_server_lifetime_it_lives_while_the_pool_is_busy() -> (
    None
):
    pool = PoolerTimeouts(server_lifetime=None, server_idle_timeout=600.0, pool_mode="transaction")
    lifetime = orphan_lifetime(server(), pool)
    assert lifetime.idle_seconds is None
    assert "server_lifetime is off" in lifetime.idle_bound_by
    assert any("server_lifetime = 3600" in advice for advice in lifetime.shorten)


def test_a_pooler_whose_console_was_not_read_is_said_to_be_unknown() -> None:
    pool = PoolerTimeouts(None, None, "transaction", known=False)
    lifetime = orphan_lifetime(server(), pool)
    assert lifetime.idle_seconds is None
    assert "--pgbouncer" in lifetime.idle_bound_by


def test_a_session_pool_leaves_the_servers_own_bounds() -> None:
    pool = PoolerTimeouts(server_lifetime=3600.0, server_idle_timeout=600.0, pool_mode="session")
    assert orphan_lifetime(server(), pool).idle_seconds == 7875


seconds = st.one_of(st.none(), st.floats(min_value=1, max_value=1e6))


@given(seconds, seconds, st.one_of(st.none(), st.integers(1, 20)), seconds, seconds)
def test_no_enabled_bound_is_exceeded(
    idle: float | None,
    interval: float | None,
    count: int | None,
    session: float | None,
    xact: float | None,
) -> None:
    lifetime = orphan_lifetime(
        server(
            tcp_keepalives_idle=idle,
            tcp_keepalives_interval=interval,
            tcp_keepalives_count=count,
            idle_session_timeout=session,
            idle_in_transaction_session_timeout=xact,
        )
    )
    keepalive = (idle or LINUX_KEEPALIVE[0]) + (interval or LINUX_KEEPALIVE[1]) * (
        count or LINUX_KEEPALIVE[2]
    )
    assert lifetime.idle_seconds == min(keepalive, session or keepalive)
    assert lifetime.in_transaction_seconds == min(keepalive, xact or keepalive)


def orphans(
    snap: LockSnapshot, pool: PoolerSnapshot | None = None, timeouts: ServerSettings | None = None
) -> list[Finding]:
    found = detect_locks(snap, LockSettings(orphan_after=60), NOW, pool, timeouts=timeouts)
    return [f for f in found if f.kind is FindingKind.LOCK_ORPHANED]


def test_an_orphan_carries_how_long_it_can_live_on_its_server() -> None:
    snap = snapshot(held(42, 1234, held_for=900), backends=[backend(1234, "app", idle_for=900)])
    timeouts = ServerSettings(server(idle_session_timeout=3600.0))
    (orphan,) = orphans(snap, timeouts=timeouts)
    assert evidence_as(orphan, LockEvidence).orphan_lifetime == orphan_lifetime(timeouts.server)
    (unread,) = orphans(snap)
    assert evidence_as(unread, LockEvidence).orphan_lifetime is None
    held_long = detect_locks(snap, LockSettings(max_hold=60), NOW, None, timeouts=timeouts)
    assert all(
        evidence_as(f, LockEvidence).orphan_lifetime is None
        for f in held_long
        if f.kind is not FindingKind.LOCK_ORPHANED
    )


def test_an_orphan_on_a_pooled_backend_lives_until_the_pooler_retires_it() -> None:
    session = pooled_backend(state_change=ago(900))
    snap = snapshot(held(42, BACKEND_PID, held_for=900), backends=[session])
    (orphan,) = orphans(snap, pooler(), ServerSettings(server()))
    lifetime = evidence_as(orphan, LockEvidence).orphan_lifetime
    assert lifetime is not None and lifetime.idle_seconds is None
    assert "retires the server connection" in lifetime.idle_bound_by


def test_an_orphan_lives_by_its_own_roles_settings_not_the_servers() -> None:
    snap = snapshot(
        held(42, 1234, held_for=900),
        held(43, 1235, held_for=900),
        backends=[
            backend(1234, "app", idle_for=900, user="app"),
            backend(1235, "report", idle_for=900, user="report"),
        ],
    )
    timeouts = ServerSettings(
        server(idle_session_timeout=3600.0),
        (
            RoleSetting("idle_session_timeout", 60.0, "app", None),
            RoleSetting("idle_session_timeout", 120.0, None, snap.locks[0].database),
        ),
    )
    by_pid = {evidence_as(f, LockEvidence).holder_pid: f for f in orphans(snap, timeouts=timeouts)}
    app = evidence_as(by_pid[1234], LockEvidence).orphan_lifetime
    report = evidence_as(by_pid[1235], LockEvidence).orphan_lifetime
    assert app is not None and report is not None
    assert (app.idle_seconds, app.idle_bound_by) == (60, "idle_session_timeout (ALTER ROLE app)")
    assert report.idle_seconds == 120
    assert report.idle_bound_by == f"idle_session_timeout (ALTER DATABASE {snap.locks[0].database})"


def test_a_role_in_a_database_wins_over_the_role_which_wins_over_the_database() -> None:
    settings = ServerSettings(
        server(),
        (
            RoleSetting("idle_in_transaction_session_timeout", 30.0, None, "shop"),
            RoleSetting("idle_in_transaction_session_timeout", 20.0, "app", None),
            RoleSetting("idle_in_transaction_session_timeout", 10.0, "app", "shop"),
        ),
    )
    assert timeouts_for(settings, "app", "shop").idle_in_transaction_session_timeout == 10
    assert timeouts_for(settings, "app", "blog").idle_in_transaction_session_timeout == 20
    assert timeouts_for(settings, "web", "shop").idle_in_transaction_session_timeout == 30
    assert timeouts_for(settings, "web", "blog").idle_in_transaction_session_timeout is None


def test_a_server_value_hidden_by_lockwatchs_own_role_is_said_to_be_assumed() -> None:
    settings = ServerSettings(server(), (), hidden=("idle_session_timeout",))
    lifetime = orphan_lifetime(timeouts_for(settings, "app", "shop"))
    assert any(
        note.startswith("idle_session_timeout: the server's value is not visible")
        for note in lifetime.assumed
    )
    own = ServerSettings(
        server(),
        (RoleSetting("idle_session_timeout", 60.0, "app", None),),
        ("idle_session_timeout",),
    )
    assert not any(
        "not visible" in note for note in orphan_lifetime(timeouts_for(own, "app", "x")).assumed
    )

"""The guarded SQL of an incident's next step (``model/remediation.py``), run on
Debian's PostgreSQL 15 as the roles the runbooks name: it ends a real holder
for a role with only pg_signal_backend and pg_read_all_stats (or pg_monitor),
and says "hidden", "reused", "gone" or "released" instead of ending anything
when that is what the server shows; a role that may not signal the session
gets an error. A bystander session is never touched.

The server runs in a PID namespace of its own (``tests/fixtures/pidns.py``),
so a pid is really given again to a new backend."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import psycopg
import pytest

from lockwatch.demo.pgbinaries import debian_bin_dirs
from lockwatch.model.remediation import OUTCOMES, terminate_sql
from tests.fixtures.pidns import PidNamespaceServer, pid_namespace_server
from tests.fixtures.postgres import DEBIAN_VERSION, wait_until

pytestmark = pytest.mark.pg

Session = psycopg.Connection[tuple[Any, ...]]
ROLES = {
    "oncall": "pg_signal_backend, pg_read_all_stats",
    "oncall_monitor": "pg_signal_backend, pg_monitor",
    "signal_only": "pg_signal_backend",
    "stats_only": "pg_read_all_stats",
}


@pytest.fixture(scope="module")
def server() -> Iterator[PidNamespaceServer]:
    bin_dir = debian_bin_dirs().get(DEBIAN_VERSION)
    assert bin_dir is not None, "scripts/bootstrap installs Debian's PostgreSQL 15"
    for server in pid_namespace_server({}, bin_dir):
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            admin.execute("CREATE ROLE app LOGIN")
            for role, grants in ROLES.items():
                admin.execute(f"CREATE ROLE {role} LOGIN")
                admin.execute(f"GRANT {grants} TO {role}")
        yield server


@pytest.fixture
def sessions() -> Iterator[list[Session]]:
    opened: list[Session] = []
    yield opened
    for session in opened:
        session.close()


def connect(server: PidNamespaceServer, sessions: list[Session], role: str = "app") -> Session:
    session = psycopg.connect(server.dsn(user=role), autocommit=True, application_name=role)
    sessions.append(session)
    return session


def holder(server: PidNamespaceServer, sessions: list[Session], key: int) -> Session:
    session = connect(server, sessions)
    session.execute("SELECT pg_advisory_lock(%s)", (key,))
    return session


def guarded(server: PidNamespaceServer, sessions: list[Session], key: int) -> tuple[Session, str]:
    """A holder of ``key``, and the guarded statement that ends it."""
    hung = holder(server, sessions, key)
    start = started(server, hung.info.backend_pid)
    assert start is not None
    return hung, terminate_sql(hung.info.backend_pid, start)


def started(server: PidNamespaceServer, pid: int) -> datetime | None:
    """The session's backend_start, as lockwatch's pg_monitor role reads it."""
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        row = admin.execute(
            "SELECT backend_start FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
    return None if row is None else row[0]


def run_as(server: PidNamespaceServer, role: str, statement: str) -> str:
    """The statement's one outcome, run as ``role`` the way psql would."""
    with psycopg.connect(server.dsn(user=role), autocommit=True) as conn:
        rows = conn.execute(statement.encode()).fetchall()
    assert len(rows) == 1, rows
    outcome = str(rows[0][0])
    assert outcome.split(":", maxsplit=1)[0] in OUTCOMES, outcome
    return outcome


def alive(session: Session) -> bool:
    try:
        return session.execute("SELECT 1").fetchone() == (1,)
    except psycopg.OperationalError:
        return False


def test_the_roles_the_runbooks_name_end_the_holder_and_nobody_else(
    server: PidNamespaceServer, sessions: list[Session]
) -> None:
    bystander = holder(server, sessions, 3301)
    for role, key in (("oncall", 3302), ("oncall_monitor", 3303)):
        hung, statement = guarded(server, sessions, key)
        pid = hung.info.backend_pid
        outcome = run_as(server, role, statement)
        assert outcome == f"terminated: pid {pid} is ending; its locks go free"
        wait_until(lambda: started(server, pid) is None, message=f"pid {pid} ended")  # noqa: B023
    assert alive(bystander)


def test_a_role_without_pg_read_all_stats_is_told_it_cannot_see_the_session(
    server: PidNamespaceServer, sessions: list[Session]
) -> None:
    hung, statement = guarded(server, sessions, 3304)
    pid = hung.info.backend_pid
    outcome = run_as(server, "signal_only", statement)
    assert outcome.startswith(f"hidden: your role cannot see when pid {pid} started")
    assert "pg_read_all_stats" in outcome
    assert alive(hung)


def test_a_role_without_pg_signal_backend_gets_an_error_and_ends_nothing(
    server: PidNamespaceServer, sessions: list[Session]
) -> None:
    hung, statement = guarded(server, sessions, 3305)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        run_as(server, "stats_only", statement)
    assert alive(hung)


def test_a_pid_given_to_another_session_is_told_apart_from_one_gone(
    server: PidNamespaceServer, sessions: list[Session]
) -> None:
    hung, statement = guarded(server, sessions, 3306)
    pid = hung.info.backend_pid
    hung.close()
    wait_until(lambda: started(server, pid) is None, message=f"pid {pid} ended")
    assert (
        run_as(server, "oncall", statement) == f"gone: no session has pid {pid} now: nothing to end"
    )

    def reused() -> Session | None:
        server.next_pid_is(pid)
        session = holder(server, sessions, 3307)
        return session if session.info.backend_pid == pid else None

    later = wait_until(reused, timeout=30, message=f"a new backend with pid {pid}")
    outcome = run_as(server, "oncall", statement)
    assert outcome.startswith(f"reused: pid {pid} is another session now, started ")
    assert alive(later)


def test_a_session_that_let_go_of_its_locks_is_left_alone(
    server: PidNamespaceServer, sessions: list[Session]
) -> None:
    done, statement = guarded(server, sessions, 3308)
    pid = done.info.backend_pid
    done.execute("SELECT pg_advisory_unlock_all()")
    outcome = run_as(server, "oncall", statement)
    assert outcome == f"released: pid {pid} holds no lock now: nothing done"
    assert alive(done)

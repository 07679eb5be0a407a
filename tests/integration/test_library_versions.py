"""check-config reads the schema version of the queue libraries a config's
presets read (issue 25 item 5): silent on a version lockwatch knows, a warning
on a newer one (read as the latest known), a problem and exit 1 on one it
cannot read. The schema is the real pg-boss 12's, installed by pg-boss
itself; its own pgboss.version table is what is changed and read."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from lockwatch.cli import main
from lockwatch.demo.pgcluster import free_port
from tests.fixtures.postgres import MONITOR_PASSWORD, PgDatabase
from tests.integration.test_catalogue_libraries import (
    Workers,
    grant_graphile_worker,
    grant_schema,
    url,
    workers,
)
from tests.integration.test_lib_pg_boss import QUEUE, Boss, boss, pg, server

__all__ = ["boss", "pg", "server", "workers"]  # fixtures of other files, used here

pytestmark = pytest.mark.pg


def check(pg: PgDatabase, tmp_path: Path, preset: str = "pg-boss") -> Result:
    config = tmp_path / "lockwatch.yml"
    config.write_text(
        "targets:\n"
        f"  - name: main\n    dsn: {pg.monitor_dsn!r}\n"
        f"    queues:\n      - name: {QUEUE}\n        preset: {preset}\n        queue: {QUEUE}\n"
    )
    return CliRunner().invoke(main, ["check-config", str(config)], catch_exceptions=False)


def set_version(pg: PgDatabase, version: int) -> None:
    pg.connect().execute("UPDATE pgboss.version SET version = %s", (version,))


def test_check_config_judges_the_installed_pg_boss_schema_version(
    pg: PgDatabase, boss: Boss, tmp_path: Path
) -> None:
    boss.start("producer", "1")
    grant_schema(pg, "pgboss")
    (installed,) = pg.connect().execute("SELECT max(version) FROM pgboss.version").fetchone() or (
        None,
    )
    assert isinstance(installed, int)

    known = check(pg, tmp_path)
    assert known.exit_code == 0, known.output
    assert "warning" not in known.output and "problem" not in known.output, known.output

    set_version(pg, 99)
    newer = check(pg, tmp_path)
    assert newer.exit_code == 0, newer.output
    assert (
        f"warning: target main, queue {QUEUE}: pg-boss schema version 99 is newer than "
        "lockwatch knows"
    ) in newer.stdout

    set_version(pg, 20)
    older = check(pg, tmp_path)
    assert older.exit_code == 1, older.output
    assert (
        f"problem: target main, queue {QUEUE}: pg-boss schema version 20 is older than "
        "lockwatch reads"
    ) in older.stderr
    assert MONITOR_PASSWORD not in older.output + newer.output


def test_check_config_judges_the_installed_graphile_worker_schema_version(
    pg: PgDatabase, workers: Workers, tmp_path: Path
) -> None:
    workers.start("graphile_worker.js", url(pg), QUEUE)
    grant_graphile_worker(pg)
    admin = pg.connect()
    (installed,) = admin.execute("SELECT max(id) FROM graphile_worker.migrations").fetchone() or (
        None,
    )
    assert installed == 18, "graphile-worker 0.16.6's last migration"

    known = check(pg, tmp_path, "graphile-worker")
    assert known.exit_code == 0, known.output
    assert "warning" not in known.output and "problem" not in known.output, known.output

    admin.execute("INSERT INTO graphile_worker.migrations (id) VALUES (21)")
    newer = check(pg, tmp_path, "graphile-worker")
    assert newer.exit_code == 0, newer.output
    assert (
        f"warning: target main, queue {QUEUE}: graphile-worker schema version 21 is newer "
        "than lockwatch knows (up to 20, graphile-worker 0.16 to 0.18)"
    ) in newer.stdout


def test_check_config_says_an_unreachable_targets_versions_were_not_read(tmp_path: Path) -> None:
    """A warning without the password; the config itself is fine (exit 0)."""
    port = free_port()  # nothing listens there
    config = tmp_path / "lockwatch.yml"
    config.write_text(
        "targets:\n"
        f"  - name: main\n    dsn: 'postgresql://u:s3cret-pw@127.0.0.1:{port}/db'\n"
        "    queues:\n      - name: jobs\n        preset: graphile-worker\n"
    )
    result = CliRunner().invoke(main, ["check-config", str(config)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"{config}: warning: target main: library versions not read: " in result.stdout
    assert "s3cret-pw" not in result.output

"""The jobs, pings and pgbouncer sections: good files load, and every mistake
is reported with its dotted path and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockwatch.config.load import ConfigError, load_settings
from tests.unit.config.test_loader import DSN, minimal, problems_of, write

TOKEN = "a-ping-token-of-length"


def test_jobs_pings_and_a_pgbouncer_load(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        minimal(
            target_extra="    pgbouncer: {dsn: 'host=127.0.0.1 port=6432 dbname=pgbouncer user=stats'}\n",
            top_extra=(
                "state_dir: state\n"
                "pings: {token: '${PING_TOKEN}'}\n"
                "jobs:\n"
                "  - name: nightly\n"
                "    query: SELECT started_at FROM runs\n"
                "    schedule: {cron: '0 3 * * *', timezone: Europe/Berlin, grace: 10m}\n"
                "    max_duration: 30m\n"
                "  - name: hourly\n"
            ),
        ),
    )
    settings = load_settings(path, {"PING_TOKEN": TOKEN})
    nightly, hourly = settings.jobs
    assert nightly.target == hourly.target == "main"  # the only target
    assert nightly.schedule is not None and nightly.schedule.grace == 600
    assert hourly.query is None and hourly.schedule is None
    assert settings.pings.token == TOKEN and settings.pings.store_dsn is None
    assert settings.targets[0].pgbouncer is not None


@pytest.mark.parametrize(
    ("top", "path", "message"),
    [
        (
            "jobs:\n  - name: n\n    query: q\n    schedule: {cron: '0 25 * * *'}\n",
            "jobs[0].schedule.cron",
            "Bad hour",
        ),
        (
            "jobs:\n  - name: n\n    query: q\n    schedule: {cron: '0 3 * * *', timezone: Mars/Base}\n",
            "jobs[0].schedule.timezone",
            "unknown time zone",
        ),
        (
            "jobs:\n  - name: n\n    query: q\n    target: elsewhere\n",
            "jobs[0].target",
            "no target named 'elsewhere'",
        ),
        (
            "jobs:\n  - name: n\n    query: q\n  - name: n\n    query: q\n",
            "jobs[1].name",
            "already used",
        ),
        ("jobs:\n  - name: 'a/b'\n    query: q\n", "jobs[0].name", ""),
        ("jobs:\n  - name: n\n", "jobs[0]", "set pings.token"),
        ("pings: {token: '${T}'}\njobs:\n  - name: n\n", "jobs[0]", "kept in state_dir"),
        (
            "pings: {token: literally-in-the-file}\n",
            "pings.token",
            "keep the secret out of the config file",
        ),
        ("pings: {token: '${SHORT}'}\n", "pings.token", "too short"),
        (
            "pings: {token: '${T}', store: mysql}\n",
            "pings.store",
            "expected one of sqlite, postgres",
        ),
        (
            "jobs:\n  - name: n\n    query: q\n    max_duration: soon\n",
            "jobs[0].max_duration",
            "not a duration",
        ),
        (
            "jobs:\n  - name: n\n    query: q\n    schedul: {}\n",
            "jobs[0].schedul",
            "did you mean 'schedule'",
        ),
    ],
)
def test_each_job_or_ping_mistake_is_reported_with_its_path(
    tmp_path: Path, top: str, path: str, message: str
) -> None:
    problems = problems_of(write(tmp_path, minimal(top_extra=top)), {"T": TOKEN, "SHORT": "x1y2z3"})
    assert [(p.path, message in p.message) for p in problems] == [(path, True)], problems
    assert all(p.line is not None for p in problems)
    assert TOKEN not in str(ConfigError(problems))


def test_a_pgbouncer_with_two_dsns_is_rejected(tmp_path: Path) -> None:
    (problem,) = problems_of(
        write(tmp_path, minimal(target_extra=f"    pgbouncer: {{dsn: '{DSN}', dsn_file: x}}\n"))
    )
    assert problem.path == "targets[0].pgbouncer"
    assert "either 'dsn' or 'dsn_file'" in problem.message

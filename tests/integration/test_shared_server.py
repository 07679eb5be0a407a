"""Two databases of one server as two targets (issue 24, defect 1): a real
``lockwatch run`` with a Slack stand-in, one convoy in one database. Each
target reads the whole server's ``pg_locks``, so before the fix the convoy
was two incidents, two messages at opening and two at resolution. Now the
server's locks are judged and told once: by the target of the convoy's
database, which the daemon recognises as the other target's server by its
system identifier although the two DSNs name it differently."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import psycopg
import pytest
import requests
from psycopg.conninfo import make_conninfo

from lockwatch.demo.pgcluster import LocalCluster
from lockwatch.demo.scenarios import ConvoyIncident
from tests.fixtures.postgres import PgDatabase, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config
from tests.fixtures.standins import ChatStandin

pytestmark = [
    pytest.mark.pg,
    pytest.mark.slow,
    pytest.mark.parametrize("pg_server", ["pg18"], indirect=True),
]

LOCKS = "{max_hold: 1h, orphan_after: 1h, convoy_waiters: 2, convoy_wait: 1s}"


def another_name(dsn: str) -> str:
    """The DSN with the server's address spelled so that no config check can
    tell it is the same server (127.1 is 127.0.0.1 to the resolver)."""
    return make_conninfo(dsn, host="127.1")


@pytest.fixture
def app2(pg_server: LocalCluster) -> Iterator[PgDatabase]:
    with closing(PgDatabase(pg_server)) as database:
        yield database


@pytest.fixture
def lockwatch(
    tmp_path: Path, pg: PgDatabase, app2: PgDatabase, standin: ChatStandin
) -> Iterator[LockwatchProcess]:
    port = free_port()
    config = write_config(
        tmp_path,
        port,
        {"app": pg.monitor_dsn, "app2": another_name(app2.monitor_dsn)},
        locks=LOCKS,
    )
    (tmp_path / "slack-url").write_text(standin.slack_url)
    with config.open("a") as more:
        more.write(
            "notify:\n  channels:\n"
            f"    - {{name: team, type: slack, webhook_url_file: {tmp_path / 'slack-url'}}}\n"
        )
    process = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    process.start()
    yield process
    assert process.stop() in (0, -signal.SIGKILL), process.log(whole=True)


def open_incidents(lockwatch: LockwatchProcess) -> list[dict[str, object]]:
    answer = requests.get(f"{lockwatch.base}/api/v1/incidents?state=open", timeout=5)
    answer.raise_for_status()
    return list(answer.json()["incidents"])


def series(exposition: str) -> list[str]:
    return [line.split(" ")[0] for line in exposition.splitlines() if not line.startswith("#")]


def test_a_convoy_in_one_of_two_databases_of_one_server_is_one_incident_told_once(
    lockwatch: LockwatchProcess, pg: PgDatabase, app2: PgDatabase, standin: ChatStandin
) -> None:
    def polled(target: str) -> bool:
        return (lockwatch.metric("lockwatch_polls_total", target=target) or 0) >= 2

    wait_until(lambda: polled("app") and polled("app2"), timeout=60, message="both polled")
    log = lockwatch.log()
    assert f"app2: judges the advisory locks of database {app2.database} only" in log
    assert (
        f"app: judges the advisory locks of database {pg.database} and every database no "
        f"other target of its server names (target app2 judges {app2.database})"
    ) in log

    convoy = ConvoyIncident(pg.admin_dsn, waiters=3)
    convoy.start()
    try:
        wait_until(lambda: standin.delivered("slack"), timeout=60, message="the opening message")
        # Long enough for a second target to have told the same convoy too.
        lockwatch.wait_polls(6, "app2", timeout=60)
        (incident,) = open_incidents(lockwatch)
        assert incident["target"] == "app"
        assert [lock["key"] for lock in lockwatch.locks("app2")] == []
        assert {lock["key"] for lock in lockwatch.locks("app")} == {"42"}
        exposition = requests.get(f"{lockwatch.base}/metrics", timeout=5).text
        assert [n for n, count in Counter(series(exposition)).items() if count > 1] == []
        active = [s for s in series(exposition) if s.startswith("lockwatch_incident_active{")]
        assert len(active) == 1, active
    finally:
        convoy.stop()
    wait_until(lambda: len(standin.delivered("slack")) >= 2, timeout=60, message="a resolution")
    wait_until(lambda: not open_incidents(lockwatch), message="the incident resolved")
    opened, resolved = standin.delivered("slack")
    assert "OPENED" in opened.text and "RESOLVED" in resolved.text
    assert len(standin.delivered("slack")) == 2


def test_a_lock_in_a_database_no_target_names_is_judged_by_the_first_target(
    lockwatch: LockwatchProcess, pg_server: LocalCluster
) -> None:
    with closing(PgDatabase(pg_server)) as third:
        holder = psycopg.connect(third.admin_dsn, autocommit=True)
        holder.execute("SELECT pg_advisory_lock(77)")
        try:
            wait_until(lambda: lockwatch.locks("app"), timeout=60, message="app sees lock 77")
            assert [lock["database"] for lock in lockwatch.locks("app")] == [third.database]
            assert lockwatch.locks("app2") == []
        finally:
            holder.close()

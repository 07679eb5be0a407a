"""Resolved incidents kept in a file of the state dir or in the PostgreSQL table
pings share: the same answers from both, pruned by age and number, and read
back by another instance (or ``lockwatch incidents``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from lockwatch.config.load import load_settings
from lockwatch.detect.incidents import tell_incidents
from lockwatch.detect.locks import detect_locks
from lockwatch.model.incidents import Incident
from lockwatch.model.remediation import sql_literal
from lockwatch.state.incident_history import (
    FileHistory,
    IncidentHistory,
    PostgresHistory,
    open_history,
)
from lockwatch.state.incidents import IncidentBook
from tests.fixtures.postgres import PgDatabase
from tests.fixtures.snapshots import NOW, TARGET, snapshot
from tests.unit.detect.test_incidents import SEED_002
from tests.unit.detect.test_locks import seed_002_convoy

pytestmark = [pytest.mark.pg, pytest.mark.parametrize("pg_server", ["pg18"], indirect=True)]

Maker = Callable[..., IncidentHistory]


@pytest.fixture(params=["state_dir", "postgres"])
def make(request: pytest.FixtureRequest, tmp_path: Path, pg: PgDatabase) -> Iterator[Maker]:
    made: list[IncidentHistory] = []

    def history(**options: object) -> IncidentHistory:
        kept: IncidentHistory
        if request.param == "state_dir":
            kept = FileHistory(tmp_path, **options)  # type: ignore[arg-type]
        else:
            kept = PostgresHistory(pg.admin_dsn, **options)  # type: ignore[arg-type]
        made.append(kept)
        return kept

    yield history
    for kept in made:
        kept.close()


def resolved_in(book: IncidentBook, minutes: float) -> Incident:
    for snap, at in ((seed_002_convoy(), minutes), (snapshot(), minutes + 1)):
        groups = tell_incidents(detect_locks(snap, SEED_002, NOW), snap)
        changes = book.update(groups, NOW + timedelta(minutes=at), at * 60)
    (incident,) = changes.resolved
    return incident


def test_the_history_keeps_the_newest_and_another_instance_reads_them(make: Maker) -> None:
    clock: list[datetime] = [NOW]
    history = make(max_kept=2, clock=lambda: clock[0])
    book = IncidentBook(TARGET, on_resolved=history.add, reopen_grace=0)  # three incidents
    first, second, third = (resolved_in(book, start) for start in (0, 5, 10))

    other = make(max_kept=2, clock=lambda: clock[0])
    kept = other.resolved()
    assert [i.id for i in kept] == [third.id, second.id]
    assert kept[0] == third
    assert other.get(first.id) is None
    assert other.get(third.id) == kept[0]
    assert other.resolved(since=third.resolved_at) == [kept[0]]

    clock[0] = NOW + timedelta(days=15)  # past the default retention of 14 days
    assert other.resolved() == []


def test_the_config_chooses_the_store(tmp_path: Path, pg: PgDatabase) -> None:
    config = tmp_path / "lockwatch.yml"
    config.write_text(
        f"state_dir: {tmp_path / 'state'}\n"
        "targets: [{name: main, dsn: 'host=127.0.0.1 dbname=app'}]\n"
        f"pings: {{store: postgres, dsn: '{pg.admin_dsn}'}}\n"
        "incidents: {history: pings, retention: 1h, max_kept: 3}\n"
    )
    history = open_history(load_settings(config))
    assert isinstance(history, PostgresHistory)
    assert (history.retention, history.max_kept) == (timedelta(hours=1), 3)
    history.close()
    config.write_text(config.read_text().replace("history: pings", "history: state_dir"))
    assert isinstance(open_history(load_settings(config)), FileHistory)


HOSTILE = ["it's", "a\\b", "\\'; DROP TABLE x; --", "line\nbreak", "$$dollar$$", "é 😀", "''"]


def test_the_next_step_s_literals_read_back_as_the_client_s_values(pg: PgDatabase) -> None:
    """What lockwatch prints to paste into psql quotes any value safely."""
    conn = pg.connect()
    for value in HOSTILE:
        (back,) = conn.execute(f"SELECT {sql_literal(value)}").fetchone() or ("",)
        assert back == value
    conn.execute("SET standard_conforming_strings = off")
    for value in HOSTILE:
        (back,) = conn.execute(f"SELECT {sql_literal(value)}").fetchone() or ("",)
        assert back == value

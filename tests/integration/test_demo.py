"""``lockwatch demo`` tells seed 002 whole: the convoy, the held lock, and the
stalled queue with its chain of evidence."""

from __future__ import annotations

import io

import pytest

from lockwatch.demo.run import run_demo
from tests.fixtures.postgres import PgDatabase

pytestmark = [pytest.mark.pg, pytest.mark.slow]


@pytest.mark.parametrize("pg_server", ["pg18"], indirect=True)
def test_the_demo_shows_the_stalled_queue_with_the_lock_and_its_holder(pg: PgDatabase) -> None:
    out = io.StringIO()

    assert run_demo(dsn=pg.admin_dsn, duration=20.0, listen="127.0.0.1:0", out=out) == 0

    text = out.getvalue()
    assert "demo finished; nothing left running" in text, text
    stalled = text.split("FIRING queue_stalled [critical] webhooks", 1)[1].split("\n\n", 1)[0]
    assert "worker sessions wait on lock webhook-delivery (42) held by pid" in stalled
    assert "nothing completed in 10s" in stalled
    assert "  holder  pid " in stalled
    assert "related queue_growing webhooks, lock_convoy lockwatch_demo/webhook-delivery" in stalled
    assert "RESOLVED queue_stalled" in text

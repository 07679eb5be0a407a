"""``lockwatch demo`` on a taken port (issue 24, defect 6): it started
PostgreSQL and failed 13.6 s later with ``Address already in use`` and no
hint. A port the user asked for is refused at once, with how to get a free
one; the default port, taken, gives way to a free one, which it names; and
the demo ends by saying how to watch a database of the user's."""

from __future__ import annotations

import io
import re
import socket
from collections.abc import Iterator

import pytest
import requests
from click.testing import CliRunner

from lockwatch.cli import main
from lockwatch.demo.run import run_demo
from lockwatch.settings.targets import parse_listen
from lockwatch.settings.web import DEFAULT_LISTEN
from tests.fixtures.postgres import PgDatabase, free_port, run_in_thread, wait_until


@pytest.fixture
def taken() -> Iterator[tuple[str, int]]:
    """A port something else listens on."""
    port = free_port()
    with socket.socket() as other:
        other.bind(("127.0.0.1", port))
        other.listen()
        yield "127.0.0.1", port


@pytest.fixture
def default_taken() -> Iterator[None]:
    """lockwatch's default port in use (by this test, or by what already had it)."""
    host, port = parse_listen(DEFAULT_LISTEN)
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            other.bind((host, port))
            other.listen()
        except OSError:
            pass  # taken already: as good
        yield


def test_a_taken_port_asked_for_is_refused_before_anything_starts(
    taken: tuple[str, int],
) -> None:
    host, port = taken
    result = CliRunner().invoke(main, ["demo", "--web.listen-address", f"{host}:{port}"])
    assert result.exit_code == 1, result.output
    assert f"{host}:{port} is in use" in result.stderr
    assert f"--web.listen-address {host}:0 for a free port" in result.stderr
    assert "starting a throwaway PostgreSQL" not in result.stdout


@pytest.mark.pg
@pytest.mark.slow
@pytest.mark.parametrize("pg_server", ["pg18"], indirect=True)
def test_the_default_port_taken_gives_way_to_a_free_one_which_the_demo_names(
    pg: PgDatabase, default_taken: None
) -> None:
    out = io.StringIO()

    def status_page_answer() -> tuple[str, int]:
        seen = wait_until(
            lambda: re.search(r"lockwatch is watching; see (http://\S+)/ ", out.getvalue()),
            timeout=120,
            message="the demo's address",
        )
        return seen.group(1), requests.get(f"{seen.group(1)}/healthz", timeout=5).status_code

    # The demo in this thread (it takes signals), the look at it beside it.
    looking = run_in_thread(status_page_answer)
    assert (
        run_demo(dsn=pg.admin_dsn, duration=8.0, listen=DEFAULT_LISTEN, out=out, listen_given=False)
        == 0
    )
    base, status = looking.result(timeout=30)
    assert not base.endswith(f":{parse_listen(DEFAULT_LISTEN)[1]}")
    assert status == 200
    text = out.getvalue()
    assert "port 10057 is in use (another lockwatch?); the demo takes a free port" in text
    assert text.rstrip().endswith('(the README\'s "Watching your own database" says more)')
    assert "  LOCKWATCH_DSN='postgresql://lockwatch:...@db:5432/app' lockwatch run\n" in text

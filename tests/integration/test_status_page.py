"""The status page in a real browser (headless Chromium) while ``lockwatch run``
watches a convoy whose sessions carry a hostile application_name."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest
import requests

from lockwatch.demo.scenarios import ConvoyIncident, OrphanIncident
from tests.fixtures.postgres import PgDatabase, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config

pytestmark = [pytest.mark.slow, pytest.mark.parametrize("pg_server", ["pg18"], indirect=True)]

HOSTILE = '<script>alert("lw")</script>'
WINDOW = "1280,1800"


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("chromium")
    if binary is None:
        pytest.fail("chromium is missing: run scripts/bootstrap, which installs Debian's chromium")
    profile = tmp_path / f"chromium-profile-{len(list(tmp_path.glob('chromium-profile-*')))}"
    return subprocess.run(
        [
            binary,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            f"--user-data-dir={profile}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


class Dom(HTMLParser):
    """The text a person sees, and the elements the browser made."""

    def __init__(self, markup: str) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.chunks: list[str] = []
        self.feed(markup)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        self.chunks.append(data)

    @property
    def text(self) -> str:
        return " ".join(" ".join(self.chunks).split())


@dataclass
class Watched:
    lockwatch: LockwatchProcess
    convoy: ConvoyIncident


@pytest.fixture
def watched(tmp_path: Path, pg: PgDatabase) -> Iterator[Watched]:
    port = free_port()
    config = write_config(
        tmp_path,
        port,
        {"orders": pg.monitor_dsn},
        locks="{max_hold: 3s, orphan_after: 2s, convoy_waiters: 2, convoy_wait: 1s}",
    )
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    convoy = ConvoyIncident(pg.admin_dsn, waiters=3, app_prefix=HOSTILE)
    orphan = OrphanIncident(pg.admin_dsn)
    lockwatch.start()
    convoy.start()
    orphan.start()
    try:
        yield Watched(lockwatch, convoy)
    finally:
        convoy.stop()
        orphan.stop()
        assert lockwatch.stop() == 0, lockwatch.log(whole=True)


def test_the_status_page_shows_the_convoy_its_holder_and_waiters_as_text(
    tmp_path: Path, watched: Watched
) -> None:
    lockwatch = watched.lockwatch
    wait_until(lambda: lockwatch.finding("lock_convoy", "orders"), message="convoy found")
    wait_until(lambda: lockwatch.finding("lock_orphaned", "orders"), message="orphan found")

    dom = Dom(chromium(tmp_path, "--dump-dom", f"{lockwatch.base}/").stdout)

    assert "script" not in dom.tags, "a value from the database became markup"
    assert "lock_convoy" in dom.text and "lock_orphaned" in dom.text
    holder = watched.convoy.holder
    assert holder is not None
    assert f"{HOSTILE}-1" in dom.text, "the holder's application_name is not shown as text"
    assert str(holder.pid) in dom.text
    for waiter in watched.convoy.waiters:
        assert str(waiter.pid) in dom.text
    for number in (2, 3, 4):
        assert f"{HOSTILE}-{number}" in dom.text
    assert "3 waiting" in dom.text
    assert "active findings" in dom.text


def test_the_status_page_is_self_contained_and_a_screenshot_is_kept(
    tmp_path: Path, watched: Watched
) -> None:
    lockwatch = watched.lockwatch
    wait_until(lambda: lockwatch.finding("lock_convoy", "orders"), message="convoy found")
    response = requests.get(f"{lockwatch.base}/", timeout=5)

    assert "://" not in response.text, "the page refers to something outside itself"
    assert "<script" not in response.text
    assert "default-src 'none'" in response.headers["Content-Security-Policy"]
    assert '<meta http-equiv="refresh"' in response.text

    screenshot = tmp_path / "status-page.png"
    chromium(
        tmp_path,
        "--hide-scrollbars",
        f"--window-size={WINDOW}",
        f"--screenshot={screenshot}",
        f"{lockwatch.base}/",
    )
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert screenshot.stat().st_size > 20_000, "a blank page"
    print(f"status page screenshot: {screenshot}")

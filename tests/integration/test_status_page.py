"""The status page in a real browser (headless Chromium) while ``lockwatch run``
watches a convoy whose sessions carry a hostile application_name: incidents
lead, nothing runs, the phone layout fits 412 px, and a session holding 4,001
locks is one card on a page under 50 KB."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import psycopg
import pytest
import requests

from lockwatch.demo.scenarios import ConvoyIncident, OrphanIncident
from lockwatch.model.findings import Severity
from tests.fixtures.browser import DESKTOP, PHONE
from tests.fixtures.browser import chromium as browser
from tests.fixtures.postgres import PgDatabase, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config

pytestmark = [pytest.mark.slow, pytest.mark.parametrize("pg_server", ["pg18"], indirect=True)]

HOSTILE = '<script>alert("lw")</script>'


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


def open_incidents(lockwatch: LockwatchProcess) -> int:
    return sum(
        int(lockwatch.metric("lockwatch_incidents", target="orders", severity=s.value) or 0)
        for s in Severity
    )


def test_the_status_page_leads_with_the_convoy_incident_its_root_and_waiters_as_text(
    tmp_path: Path, watched: Watched
) -> None:
    lockwatch = watched.lockwatch
    wait_until(lambda: lockwatch.finding("lock_convoy", "orders"), message="convoy found")
    wait_until(lambda: lockwatch.finding("lock_orphaned", "orders"), message="orphan found")

    dom = Dom(chromium(tmp_path, "--dump-dom", f"{lockwatch.base}/").stdout)

    assert "script" not in dom.tags, "a value from the database became markup"
    text = dom.text
    assert text.index("Open incidents") < text.index("Advisory locks now")
    assert "lock_convoy" in text and "lock_orphaned" in text
    holder = watched.convoy.holder
    assert holder is not None
    assert f"root pid {holder.pid} · {HOSTILE}-1" in text, "the root holder is not marked"
    assert f"held by pid {holder.pid}, the root of incident" in text
    assert "next step" in text and "pg_terminate_backend" in text
    for waiter in watched.convoy.waiters:
        assert str(waiter.pid) in text
    for number in (2, 3, 4):
        assert f"{HOSTILE}-{number}" in text
    assert "3 waiting" in text
    assert "open incident" in text


def test_the_status_page_is_self_contained_refreshes_only_when_asked_and_fits_a_phone(
    tmp_path: Path, watched: Watched
) -> None:
    lockwatch = watched.lockwatch
    wait_until(lambda: lockwatch.finding("lock_convoy", "orders"), message="convoy found")
    wait_until(
        lambda: open_incidents(lockwatch) >= 2, message="the convoy and the orphan are incidents"
    )
    response = requests.get(f"{lockwatch.base}/", timeout=5)

    links = re.findall(r'(?:href|src)="([^"]*)"', response.text)
    outside = [link for link in links if not link.startswith(("/", "#"))]
    runbooks = f"{lockwatch.base}/runbooks#"
    assert outside and all(link.startswith(runbooks) for link in outside), (
        "the page refers to something besides lockwatch itself and its runbooks"
    )
    # each runbook link opens, at its own section: lockwatch serves them
    served = requests.get(f"{lockwatch.base}/runbooks", timeout=5)
    assert served.status_code == 200
    for link in set(outside):
        assert f'id="{link.rsplit("#", 1)[1]}"' in served.text, link
    assert "<script" not in response.text and "<link" not in response.text
    assert "default-src 'none'" in response.headers["Content-Security-Policy"]
    assert '<meta http-equiv="refresh"' in response.text
    still = requests.get(f"{lockwatch.base}/?refresh=off", timeout=5)
    assert 'http-equiv="refresh"' not in still.text and '<a href="/">' in still.text

    shots = {}
    for name, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
        with browser(tmp_path, viewport) as page:
            page.open(f"{lockwatch.base}/?refresh=off")
            width = page.evaluate("document.documentElement.scrollWidth")
            first = page.evaluate("document.querySelector('main > section').id")
            shots[name] = page.screenshot(tmp_path / f"status-{name}.png")
        assert width <= viewport[0], f"{name}: the page is {width} px wide in {viewport[0]} px"
        assert first == "incidents", f"{name}: the page does not lead with its incidents"
    for shot in shots.values():
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert shot.stat().st_size > 20_000, "a blank page"
    print(f"status page screenshots: {' '.join(str(p) for p in shots.values())}")


@pytest.fixture
def hog(tmp_path: Path, pg: PgDatabase) -> Iterator[LockwatchProcess]:
    """``lockwatch run`` watching one psql-like session that holds 4,001 advisory locks."""
    port = free_port()
    config = write_config(
        tmp_path, port, {"orders": pg.monitor_dsn}, locks="{max_hold: 1s, orphan_after: 1s}"
    )
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    with psycopg.connect(pg.admin_dsn, autocommit=True) as session:
        session.execute("SET application_name = 'psql'")
        session.execute("SELECT count(pg_advisory_lock(k)) FROM generate_series(1, 4001) AS k")
        lockwatch.start()
        try:
            yield lockwatch
        finally:
            assert lockwatch.stop() == 0, lockwatch.log(whole=True)


def test_a_session_holding_4001_locks_is_one_incident_on_a_page_under_50_kb(
    hog: LockwatchProcess,
) -> None:
    wait_until(
        lambda: hog.finding("lock_orphaned", "orders") and open_incidents(hog) == 1,
        timeout=60,
        message="the session's locks found, as one incident",
    )
    page = requests.get(f"{hog.base}/", timeout=5).text
    size = len(page.encode("utf-8"))

    assert page.count('<article class="incident') == 1
    assert "4001 locks held" in page
    assert size < 50_000, f"the page is {size / 1024:.0f} KB"
    print(f"4,001 locks: the status page is {size} bytes")


def test_a_resolved_incident_stays_on_the_page_with_how_it_ended_and_its_timeline(
    tmp_path: Path, watched: Watched
) -> None:
    lockwatch = watched.lockwatch
    wait_until(lambda: open_incidents(lockwatch) >= 2, message="the convoy and the orphan")
    watched.convoy.stop()

    def resolved_section() -> str | None:
        page = requests.get(f"{lockwatch.base}/?refresh=off", timeout=5).text
        start = page.find('<section id="resolved">')
        return page[start:] if start >= 0 else None

    section = wait_until(resolved_section, timeout=30, message="the convoy listed as resolved")
    dom = Dom(section)
    assert "Recently resolved (1)" in dom.text
    assert re.search(r"resolved \((released|session_ended|cleared)\)", dom.text), dom.text
    assert "opened" in dom.text and "lock_convoy" in dom.text
    assert '<ol class="timeline">' in section

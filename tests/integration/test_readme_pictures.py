"""The README's pictures of the status page come from the demo (issue 24,
defect 12): they were the escaping test's screenshots, an application named
``<script>alert("lw")</script>-1`` in a random database. This test runs the
demo as a user does, waits for its convoy to stall the webhook queue, and
photographs the status page at desktop and phone widths.

Every run makes the pictures and checks what they show; with
``LOCKWATCH_PICTURES=write`` it also writes them over ``docs/status-*.png``,
which is how the README's pictures are made (they carry a PNG text chunk
naming this test, which the test checks, so a picture from elsewhere fails):

    LOCKWATCH_PICTURES=write .venv/bin/pytest tests/integration/test_readme_pictures.py
"""

from __future__ import annotations

import io
import os
import re
import signal
import struct
import zlib
from pathlib import Path

import pytest
import requests

from lockwatch.demo.run import run_demo
from tests.fixtures.browser import DESKTOP, PHONE, chromium
from tests.fixtures.paths import ROOT
from tests.fixtures.postgres import PgDatabase, run_in_thread, wait_until

pytestmark = pytest.mark.slow

PICTURES = {
    "desktop": ROOT / "docs" / "status-desktop.png",
    "phone": ROOT / "docs" / "status-phone.png",
}
SOURCE = "lockwatch demo, photographed by tests/integration/test_readme_pictures.py"
PNG = b"\x89PNG\r\n\x1a\n"


def with_source(png: bytes) -> bytes:
    """The PNG with a tEXt chunk saying where it comes from, after its header."""
    assert png[:8] == PNG
    text = b"Source\0" + SOURCE.encode()
    chunk = struct.pack(">I", len(text)) + b"tEXt" + text
    chunk += struct.pack(">I", zlib.crc32(b"tEXt" + text))
    header_end = 8 + 8 + 13 + 4  # signature, IHDR's length and type, its data, its CRC
    return png[:header_end] + chunk + png[header_end:]


def text_chunks(png: bytes) -> dict[str, str]:
    found, at = {}, 8
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, data = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        if kind == b"tEXt":
            key, _, value = data.partition(b"\0")
            found[key.decode()] = value.decode()
        at += 12 + length
    return found


def the_readme_shows(name: str) -> bool:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return f"(docs/{PICTURES[name].name})" in readme or f"docs/{PICTURES[name].name}" in readme


def test_the_readmes_pictures_are_the_demos() -> None:
    for name, path in PICTURES.items():
        assert the_readme_shows(name), f"the README no longer shows {path.name}"
        assert text_chunks(path.read_bytes()).get("Source") == SOURCE, (
            f"{path.name} was not made by this test: LOCKWATCH_PICTURES=write makes it"
        )


def stalled_convoy(base: str) -> bool:
    """The demo's convoy is one open incident with its queue stalled behind it,
    and the orphan another."""
    answer = requests.get(f"{base}/api/v1/incidents?state=open", timeout=5).json()
    kinds = [set(incident["kinds"]) for incident in answer["incidents"]]
    convoy = any({"lock_convoy", "queue_stalled"} <= found for found in kinds)
    return convoy and any("lock_orphaned" in found for found in kinds)


@pytest.mark.pg
@pytest.mark.parametrize("pg_server", ["pg18"], indirect=True)
def test_the_status_page_during_the_demo_is_photographed_for_the_readme(
    pg: PgDatabase, tmp_path: Path
) -> None:
    out = io.StringIO()

    def photograph() -> dict[str, bytes]:
        seen = wait_until(
            lambda: re.search(r"lockwatch is watching; see (http://\S+)/ ", out.getvalue()),
            timeout=120,
            message="the demo's address",
        )
        base = seen.group(1)
        try:
            wait_until(lambda: stalled_convoy(base), timeout=120, message="the stalled queue")
            shots = {}
            for name, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
                with chromium(tmp_path, viewport) as page:
                    page.open(f"{base}/?refresh=off")
                    shots[name] = page.screenshot(tmp_path / f"{name}.png").read_bytes()
            page_text = requests.get(f"{base}/?refresh=off", timeout=5).text
            shots["text"] = page_text.encode()
            return shots
        finally:
            os.kill(os.getpid(), signal.SIGINT)  # the demo's own Ctrl-C

    camera = run_in_thread(photograph)
    assert run_demo(dsn=pg.admin_dsn, duration=300.0, listen="127.0.0.1:0", out=out) == 0
    shots = camera.result(timeout=60)
    page = shots.pop("text").decode()
    # A page a user recognises: the demo's worker, lock and queue, nothing hostile.
    assert "webhook-worker-" in page and "webhook-delivery (42)" in page
    assert "queue webhooks" in page and "blog-generator" in page
    assert "&lt;script&gt;" not in page
    for name, png in shots.items():
        assert png[:8] == PNG and len(png) > 20_000, f"{name}: a blank page"
        if os.environ.get("LOCKWATCH_PICTURES") == "write":
            PICTURES[name].write_bytes(with_source(png))

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from lockwatch.model.findings import Finding, FindingKind, Severity, Subject
from lockwatch.model.incident_text import alert_name
from lockwatch.model.locks import LockKey
from lockwatch.model.views import TargetStatus
from lockwatch.publish.http import HttpServer
from lockwatch.publish.metrics.registry import Metrics
from lockwatch.settings.locks import LockSettings, NamedLock
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.target_view import TargetView
from tests.fixtures.evidence import evidence_of
from tests.fixtures.incident_values import incident, session_root
from tests.fixtures.metrics import openmetrics_families
from tests.fixtures.schema import assert_valid_findings
from tests.fixtures.snapshots import NOW, TARGET, backend, held, snapshot, waiting

STALE_AFTER = 30.0
# What Prometheus 2 asks a target for.
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;"
    "version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)
TIMEOUT = 5.0


@dataclass
class FakeMonotonic:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Running:
    board: Board
    clock: FakeMonotonic
    server: HttpServer

    def url(self, path: str) -> str:
        host, port = self.server.address
        return f"http://{host}:{port}{path}"

    def get(self, path: str) -> requests.Response:
        return requests.get(self.url(path), timeout=TIMEOUT)


def polled_view(name: str = TARGET) -> TargetView:
    locks = LockSettings(named=(NamedLock("webhooks", LockKey.bigint(42)),))
    snap = snapshot(
        held(42, 1234, held_for=340, database='app"\n\\\udcff'),
        waiting(42, 1301, waited_for=310, database='app"\n\\\udcff'),
        backends=[backend(1234, "<script>alert(1)</script>\udc80"), backend(1301)],
    )
    finding = Finding(
        kind=FindingKind.LOCK_CONVOY,
        target=name,
        subject=Subject(database="app", lock="webhooks"),
        severity=Severity.CRITICAL,
        since=NOW,
        summary="1 session waits on webhooks",
        evidence=evidence_of(FindingKind.LOCK_CONVOY, Subject(database="app", lock="webhooks")),
    )
    return TargetView(
        target=Target(name=name, dsn="postgresql://mon:s3cret@127.0.0.1:6432/app", locks=locks),
        status=TargetStatus(target=name, checked_at=NOW, snapshot=snap),
        polls_total=3,
        last_success=NOW,
        findings=(finding,),
        incidents=(incident([finding], root=session_root(target=name)),),
    )


@pytest.fixture
def running() -> Iterator[Running]:
    clock = FakeMonotonic()
    board = Board(monotonic=clock)
    server = HttpServer(
        board,
        Metrics(board, clock=lambda: NOW),
        "127.0.0.1:0",
        STALE_AFTER,
        clock=lambda: NOW,
    )
    server.start()
    try:
        yield Running(board, clock, server)
    finally:
        server.stop()


def test_it_serves_metrics_in_the_text_exposition_format(running: Running) -> None:
    running.board.publish(polled_view())

    response = running.get("/metrics")

    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert f'lockwatch_up{{target="{TARGET}"}} 1.0' in response.text
    assert "s3cret" not in response.text


def test_it_serves_openmetrics_to_scrapers_that_ask_for_it(running: Running) -> None:
    running.board.publish(polled_view())
    running.board.publish(polled_view('odd "target"\n\\'))
    scraped = {}
    for path in ("/metrics", f"/metrics?target={TARGET}"):
        response = requests.get(
            running.url(path), headers={"Accept": PROMETHEUS_ACCEPT}, timeout=TIMEOUT
        )
        assert response.status_code == 200
        assert response.headers["Content-Type"].startswith("application/openmetrics-text")
        assert response.text.endswith("# EOF\n")
        # prometheus_client's OpenMetrics parser is strict (counters, escaping, # EOF).
        scraped[path] = {f.name: f for f in openmetrics_families(response.text)}

    whole, probe = scraped["/metrics"], scraped[f"/metrics?target={TARGET}"]
    polls = {s.labels["target"]: (s.name, s.value) for s in whole["lockwatch_polls"].samples}
    assert polls == {
        TARGET: ("lockwatch_polls_total", 3),
        'odd "target"\n\\': ("lockwatch_polls_total", 3),
    }
    assert "process_cpu_seconds" in whole and "lockwatch_build" in whole
    assert [s.labels for s in probe["lockwatch_polls"].samples] == [{"target": TARGET}]
    assert "process_cpu_seconds" not in probe


def test_a_quiet_targets_detail_comes_with_detail_full_or_its_own_probe(running: Running) -> None:
    quiet = TargetView(
        target=Target(name="quiet", dsn="postgresql://mon@127.0.0.1/app"),
        status=TargetStatus(target="quiet", checked_at=NOW, snapshot=snapshot(held(7, 1234))),
        polls_total=3,
        last_success=NOW,
    )
    running.board.publish(quiet)
    running.board.publish(polled_view())

    def served(path: str) -> set[tuple[str, str, str]]:
        """(name, target, the lock or finding kind) of each sample the path serves."""
        text = running.get(path).text
        return {
            (
                sample.name,
                sample.labels["target"],
                sample.labels.get("lock", sample.labels.get("kind", "")),
            )
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if "target" in sample.labels
        }

    zero = ("lockwatch_findings", "quiet", "job_missed")
    waits = ("lockwatch_advisory_lock_waiters", "quiet", "7")
    summary = served("/metrics")
    assert ("lockwatch_findings", TARGET, "lock_convoy") in summary
    assert ("lockwatch_findings", TARGET, "job_missed") not in summary
    assert ("lockwatch_advisory_lock_hold_seconds", "quiet", "7") in summary
    assert zero not in summary and waits not in summary
    full, probe = served("/metrics?detail=full"), served("/metrics?target=quiet")
    assert {zero, waits} <= full and {zero, waits} <= probe
    assert ("lockwatch_findings", TARGET, "job_missed") in full - probe
    refused = running.get("/metrics?detail=everything")
    assert refused.status_code == 400 and "full" in refused.text


def test_it_serves_findings_and_locks_as_json(running: Running) -> None:
    running.board.publish(polled_view())

    findings = running.get("/api/v1/findings")
    locks = running.get("/api/v1/locks")

    for response in (findings, locks):
        assert response.status_code == 200
        assert response.headers["Content-Type"] == "application/json"
    assert [f["kind"] for f in findings.json()["findings"]] == ["lock_convoy"]
    assert_valid_findings(findings.json())
    (target,) = locks.json()["targets"]
    assert target["locks"][0]["lock"] == "webhooks"
    assert target["locks"][0]["waiter_count"] == 1


def test_its_locks_of_one_target_are_asked_for_by_name(running: Running) -> None:
    running.board.publish(polled_view())
    running.board.publish(polled_view("other"))

    answer = running.get("/api/v1/locks?target=other").json()

    assert [target["target"] for target in answer["targets"]] == ["other"]


def test_its_status_page_links_the_endpoints_and_escapes_every_value(running: Running) -> None:
    running.board.publish(polled_view())
    running.board.publish(polled_view("<b>evil</b>"))

    response = running.get("/")

    assert response.status_code == 200
    assert response.headers["Content-Type"] == "text/html; charset=utf-8"
    assert "script-src" not in response.headers["Content-Security-Policy"]
    assert "default-src 'none'" in response.headers["Content-Security-Policy"]
    for link in ("/metrics", "/api/v1/incidents", "/api/v1/findings", "/api/v1/locks"):
        assert f'href="{link}"' in response.text
    assert "&lt;b&gt;evil&lt;/b&gt;" in response.text
    assert "<b>evil" not in response.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in response.text
    assert "<script" not in response.text
    assert "2 open incidents" in response.text


def test_health_is_ok_for_a_grace_period_before_the_first_poll_then_fails(
    running: Running,
) -> None:
    running.board.register(polled_view().target)
    assert running.get("/healthz").status_code == 200

    running.clock.advance(STALE_AFTER + 1)
    response = running.get("/healthz")

    assert response.status_code == 503
    assert "no poll finished" in response.text


def test_an_instance_with_no_target_to_watch_is_healthy_however_long_it_waits(
    running: Running,
) -> None:
    running.board.publish(polled_view())
    running.board.forget(TARGET)  # its only target left discovery

    running.clock.advance(STALE_AFTER + 60)
    response = running.get("/healthz")

    assert (response.status_code, response.text) == (200, "ok: no targets to watch\n")


def test_health_fails_with_a_reason_when_the_poll_loop_stalls(running: Running) -> None:
    running.board.publish(polled_view())
    healthy = running.get("/healthz")

    running.clock.advance(STALE_AFTER + 5)
    stalled = running.get("/healthz")

    assert (healthy.status_code, healthy.text) == (200, "ok\n")
    assert healthy.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert stalled.status_code == 503
    assert "stalled" in stalled.text
    assert "35 s ago" in stalled.text


def test_it_answers_unknown_paths_with_404_and_other_methods_with_405(running: Running) -> None:
    assert running.get("/nope").status_code == 404
    assert running.get("/metrics/extra").status_code == 404
    for method in ("POST", "PUT", "DELETE", "BREW"):
        response = requests.request(method, running.url("/metrics"), timeout=TIMEOUT)
        assert response.status_code == 405, method
        assert response.headers["Allow"] == "GET, HEAD"
    assert requests.head(running.url("/nope"), timeout=TIMEOUT).status_code == 404


def test_a_silent_client_does_not_block_other_requests(running: Running) -> None:
    with socket.create_connection(running.server.address, timeout=TIMEOUT):
        assert running.get("/healthz").status_code == 200


def test_it_logs_requests_at_debug_instead_of_writing_to_stderr(
    running: Running, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG, logger="lockwatch.publish.http")

    running.get("/healthz?token=probe-1")

    # The handler logs after the response is sent; wait for it, bounded.
    deadline = time.monotonic() + TIMEOUT
    while not any("/healthz?" in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline, "the request was never logged"
        time.sleep(0.01)
    record = next(r for r in caplog.records if "/healthz?" in r.getMessage())
    # Query strings are cut from the log: a client may put a token there.
    assert "probe-1" not in record.getMessage()
    assert record.levelno == logging.DEBUG
    assert record.name == "lockwatch.publish.http"
    assert capfd.readouterr().err == ""


def test_stop_closes_the_socket() -> None:
    board = Board()
    server = HttpServer(board, Metrics(board), "127.0.0.1:0", STALE_AFTER)
    server.start()
    address = server.address
    threads = threading.active_count()

    server.stop()

    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(address, timeout=TIMEOUT).close()
    assert threading.active_count() < threads


@pytest.mark.parametrize("listen", ["localhost:0", "[::1]:0"])
def test_it_listens_on_names_and_bracketed_ipv6_addresses(listen: str) -> None:
    if listen.startswith("[") and not _has_ipv6_loopback():
        pytest.skip("this machine has no IPv6 loopback")
    board = Board()
    server = HttpServer(board, Metrics(board), listen, STALE_AFTER)
    server.start()
    try:
        host, port = server.address
        url_host = f"[{host}]" if ":" in host else host
        response = requests.get(f"http://{url_host}:{port}/healthz", timeout=TIMEOUT)
        assert response.status_code == 200
    finally:
        server.stop()


@pytest.mark.parametrize(
    "listen", ["10057", "127.0.0.1", "::1:80", "127.0.0.1:http", ":80", "h:70000"]
)
def test_it_rejects_a_bad_listen_address_clearly(listen: str) -> None:
    board = Board()
    with pytest.raises(ValueError, match=r"host:port|brackets|port must be|not a host"):
        HttpServer(board, Metrics(board), listen, STALE_AFTER)


def test_a_busy_port_fails_with_the_address_in_the_error() -> None:
    board = Board()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        server = HttpServer(board, Metrics(board), listen, STALE_AFTER)

        with pytest.raises(OSError, match=listen):
            server.start()


def test_promtool_accepts_the_metrics(running: Running) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        message = "promtool not found: install Debian's prometheus package to check /metrics"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    running.board.publish(polled_view())
    running.board.publish(polled_view('odd "target"\n\\'))
    body = running.get("/metrics").content

    result = subprocess.run(
        [promtool, "check", "metrics"], input=body, capture_output=True, timeout=60, check=False
    )

    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert b"lockwatch_advisory_lock_hold_seconds" in body


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


def test_a_client_that_trickles_its_request_is_cut_off_at_the_deadline() -> None:
    board = Board()
    server = HttpServer(board, Metrics(board), "127.0.0.1:0", STALE_AFTER, request_deadline=1.0)
    server.start()
    host, port = server.address
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT) as slow:
            slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            cut_off = False
            # A header line every 0.2 s: each read is far inside the 10 s idle
            # timeout, so only the whole-request deadline can end this.
            for _ in range(100):
                try:
                    slow.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    cut_off = True
                    break
                time.sleep(0.2)
            assert cut_off, "a request trickling in for 20 s was never cut off"
        answer = requests.get(f"http://{host}:{port}/metrics", timeout=TIMEOUT)
        assert answer.status_code == 200
    finally:
        server.stop()


def test_it_serves_its_runbooks_with_a_section_for_every_alert(running: Running) -> None:
    """Every runbook link lockwatch gives opens on lockwatch itself, offline too."""
    response = running.get("/runbooks")
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/html")
    assert "default-src 'none'" in response.headers["Content-Security-Policy"]
    page = response.text
    for kind in FindingKind:
        assert f'id="{alert_name(kind.value).lower()}"' in page, kind
    # rendered, not shown as Markdown: bold, code and SQL blocks are HTML
    assert "<strong>What it means.</strong>" in page and "<pre><code" in page
    assert "**" not in page and "## " not in page

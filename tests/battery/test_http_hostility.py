"""lockwatch's HTTP endpoint under attack, served with TLS and basic auth from a
web-config file: wrong and missing credentials, hostile ping requests, and
hundreds of slow-loris connections while Prometheus keeps scraping."""

from __future__ import annotations

import contextlib
import secrets
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, Unpack

import bcrypt
import pytest
import requests

from lockwatch.demo.pgcluster import LocalCluster
from lockwatch.publish.http import REQUEST_TIMEOUT
from lockwatch.publish.pings import TOKEN_HEADER
from tests.battery.conftest import Record
from tests.battery.probes import footprint, scrape, settled_footprint
from tests.fixtures.postgres import PgDatabase, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config
from tests.fixtures.schema import assert_valid_findings

pytestmark = [pytest.mark.pg, pytest.mark.slow]

USER = "prometheus"
SLOW_CLIENTS = 200


class GetOptions(TypedDict, total=False):
    """What ``SecuredLockwatch.get`` changes of the request Prometheus would send."""

    auth: tuple[str, str] | None
    timeout: float


class PostOptions(TypedDict, total=False):
    """What a hostile ping request adds to the verified one."""

    headers: dict[str, str]
    data: bytes
    json: Any


class SecuredLockwatch(LockwatchProcess):
    """``lockwatch run`` behind TLS and basic auth, asked as Prometheus would."""

    def __init__(self, config: Path, log: Path, port: int, ca: Path, password: str) -> None:
        super().__init__(config, log, port)
        self.base = f"https://127.0.0.1:{port}"
        self.ca = ca
        self.auth = (USER, password)

    def get(self, path: str, **kwargs: Unpack[GetOptions]) -> requests.Response:
        options: GetOptions = {"auth": self.auth, "timeout": 10}
        options.update(kwargs)
        return requests.get(f"{self.base}{path}", verify=str(self.ca), **options)

    def metric_value(self, name: str, **labels: str) -> float:
        return scrape(self.base, verify=str(self.ca), auth=self.auth).get(name, **labels) or 0

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"lockwatch exited with {self.proc.returncode}:\n{self.log()}")
        try:
            return self.get("/healthz", timeout=2).status_code == 200
        except requests.ConnectionError:
            return False


def certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, made by openssl for the test."""
    cert, key = directory / "server.crt", directory / "server.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=lockwatch",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


@dataclass
class Secured:
    lockwatch: SecuredLockwatch
    password: str
    token: str


@pytest.fixture(scope="module")
def secured(
    battery_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Secured]:
    tmp_path = tmp_path_factory.mktemp("http")
    db = PgDatabase(battery_cluster)
    cert, key = certificate(tmp_path)
    password = "scrape-" + secrets.token_hex(8)
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=10)).decode()
    (tmp_path / "web.yml").write_text(
        f"tls_server_config:\n  cert_file: {cert.name}\n  key_file: {key.name}\n"
        f"basic_auth_users:\n  {USER}: '{hashed}'\n"
    )
    token = "ping-" + secrets.token_hex(12)
    (tmp_path / "ping-token").write_text(token + "\n")
    port = free_port()
    config = write_config(tmp_path, port, {"main": db.monitor_dsn})
    with config.open("a") as extra:
        extra.write(
            f"web_config: {tmp_path / 'web.yml'}\n"
            f"pings: {{token_file: {tmp_path / 'ping-token'}}}\n"
            "jobs:\n  - {name: nightly, target: main}\n"
        )
    lockwatch = SecuredLockwatch(config, tmp_path / "lockwatch.log", port, cert, password)
    try:
        lockwatch.start()
        yield Secured(lockwatch, password, token)
        assert lockwatch.stop() in (0, -signal.SIGKILL), lockwatch.log(whole=True)
    finally:
        db.close()


def test_tls_and_basic_auth_from_a_web_config_file_let_only_the_right_user_in(
    secured: Secured, battery: Record
) -> None:
    lockwatch = secured.lockwatch
    paths = ("/metrics", "/api/v1/findings", "/api/v1/locks", "/", "/healthz")
    allowed = {path: lockwatch.get(path).status_code for path in paths}
    assert_valid_findings(lockwatch.get("/api/v1/findings").json())
    wrong = "not-" + secured.password
    refused = {
        "no credentials": lockwatch.get("/metrics", auth=None),
        "wrong password": lockwatch.get("/metrics", auth=(USER, wrong)),
        "unknown user": lockwatch.get("/api/v1/findings", auth=("admin", secured.password)),
    }
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{lockwatch.base.rsplit(':', 1)[1]}/metrics", timeout=10)
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(f"{lockwatch.base}/metrics", auth=lockwatch.auth, timeout=10)  # not trusted

    assert allowed == dict.fromkeys(paths, 200)
    assert {name: r.status_code for name, r in refused.items()} == dict.fromkeys(refused, 401)
    assert (
        refused["no credentials"].headers["WWW-Authenticate"].startswith('Basic realm="lockwatch"')
    )
    log = wait_until(
        lambda: (text := lockwatch.log()).count("refused ") >= 3 and text,
        message="refusals logged",
    )
    assert "wrong password for user 'prometheus'" in log
    assert secured.password not in log and wrong not in log
    battery(
        "web-config",
        injected=(
            "lockwatch run with web_config: tls_server_config (openssl self-signed "
            "cert) and basic_auth_users (bcrypt, cost 10); requests without credentials, "
            "with a wrong password, an unknown user, over plain HTTP, without trusting the cert"
        ),
        did=(
            f"{len(paths)} paths answered 200 to the right user over TLS; 401 with "
            "WWW-Authenticate to each wrong request, logged with the user name; plain HTTP "
            "and an untrusted client fail the handshake"
        ),
        intact="yes: 0 responses without valid credentials; no password in the log",
    )


def test_hostile_ping_requests_are_refused_and_change_nothing(
    secured: Secured, battery: Record
) -> None:
    lockwatch = secured.lockwatch
    base, verify = lockwatch.base, str(lockwatch.ca)
    auth = {TOKEN_HEADER: secured.token}

    def post(path: str, **kwargs: Unpack[PostOptions]) -> int:
        response = requests.post(f"{base}{path}", verify=verify, timeout=10, **kwargs)
        return response.status_code

    answers = {
        "no token": post("/ping/nightly/start"),
        "wrong token": post("/ping/nightly/start", headers={TOKEN_HEADER: "nope"}),
        "token in the URL": post(f"/ping/nightly/start?token={secured.token}", headers=auth),
        "unknown job": post("/ping/weekly/start", headers=auth),
        "path tricks": post("/ping/%2E%2E/nightly/start", headers=auth),
        "broken JSON": post("/ping/nightly/start", headers=auth, data=b"{"),
        "unknown field": post("/ping/nightly/start", headers=auth, json={"hots": "x"}),
        "10,000-char host": post("/ping/nightly/start", headers=auth, json={"host": "h" * 10_000}),
    }
    context = ssl.create_default_context(cafile=verify)
    port = int(base.rsplit(":", 1)[1])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        # 100 MB announced, none sent: refused at once, nothing read.
        tls.sendall(
            f"POST /ping/nightly/start HTTP/1.1\r\nHost: x\r\n{TOKEN_HEADER}: {secured.token}"
            "\r\nContent-Length: 100000000\r\n\r\n".encode()
        )
        answers["100 MB body"] = int(tls.recv(4096).split()[1])

    def starts() -> int:
        (target,) = lockwatch.get("/api/v1/jobs").json()["targets"]
        return int(target["jobs"][0]["starts_total"])

    polls = lockwatch.metric_value("lockwatch_polls_total", target="main")
    wait_until(lambda: lockwatch.metric_value("lockwatch_polls_total", target="main") > polls + 1)
    hostile_starts = starts()
    good = post("/ping/nightly/start", headers=auth, json={"host": "app-1"})
    wait_until(lambda: starts() == 1, message="the good ping counted")

    assert answers == {
        "no token": 401,
        "wrong token": 403,
        "token in the URL": 400,
        "unknown job": 404,
        "path tricks": 404,
        "broken JSON": 400,
        "unknown field": 400,
        "10,000-char host": 400,
        "100 MB body": 413,
    }
    assert good == 200
    assert hostile_starts == 0
    assert secured.token not in lockwatch.log()
    battery(
        "ping-api",
        injected=f"{len(answers)} hostile POST /ping requests over TLS: " + ", ".join(answers),
        did="answered " + ", ".join(f"{code}" for code in answers.values()) + " in that order",
        intact=(
            "yes: 0 runs recorded from them (a good ping afterwards is the only run); the token "
            "is nowhere in the log"
        ),
    )


def test_hundreds_of_slow_clients_do_not_stop_prometheus_from_scraping(
    secured: Secured, battery: Record
) -> None:
    lockwatch = secured.lockwatch
    assert lockwatch.proc is not None
    before = footprint(lockwatch.proc.pid)
    port = int(lockwatch.base.rsplit(":", 1)[1])
    context = ssl.create_default_context(cafile=str(lockwatch.ca))
    silent: list[socket.socket] = []  # connect, never say hello
    dribbling: list[ssl.SSLSocket] = []  # handshake, then a header byte at a time
    scrapes: list[float] = []
    try:
        for n in range(SLOW_CLIENTS):
            raw = socket.create_connection(("127.0.0.1", port), timeout=10)
            if n % 2:
                silent.append(raw)
                continue
            tls = context.wrap_socket(raw, server_hostname="127.0.0.1")
            tls.sendall(b"GET /metrics HTTP/1.1\r\n")
            dribbling.append(tls)
        during = footprint(lockwatch.proc.pid)
        for _ in range(10):
            for tls in dribbling:
                tls.sendall(b"X")
            started = time.monotonic()
            response = lockwatch.get("/metrics")
            scrapes.append(time.monotonic() - started)
            assert response.status_code == 200
            assert "lockwatch_up" in response.text
    finally:
        for sock in [*dribbling, *silent]:
            with contextlib.suppress(OSError):
                sock.close()
    after = settled_footprint(lockwatch.proc.pid, before, timeout=REQUEST_TIMEOUT + 5)

    assert after.threads <= before.threads and after.fds <= before.fds, (before, after)
    battery(
        "slow-loris",
        injected=(
            f"{SLOW_CLIENTS} connections held open: {len(silent)} never start TLS, "
            f"{len(dribbling)} send a request one header byte at a time"
        ),
        did=(
            f"a thread per connection ({during.threads} threads while they were open); "
            f"10 of 10 authenticated scrapes of /metrics answered meanwhile, slowest "
            f"{1000 * max(scrapes):.0f} ms"
        ),
        intact=(
            f"yes: once they closed, back to {after.threads} threads and {after.fds} fds "
            f"(before: {before.threads}, {before.fds})"
        ),
    )

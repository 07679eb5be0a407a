"""``lockwatch mcp`` against a running daemon, behind TLS and basic auth,
watching a real server with a real convoy: the SDK's own client, in-process
and over stdio with the real ``lockwatch mcp`` process, lists and reads the
incidents, the locks as a tree, the queues and the jobs; the tools only read;
an incident reads the same as through the API, its secrets redacted there."""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import bcrypt
import psycopg
import pytest
import requests

from lockwatch.commands.api_client import ApiClient
from lockwatch.commands.mcp_server import build_server
from lockwatch.demo.pgbinaries import embedded_bin_dir
from lockwatch.demo.pgcluster import LocalCluster, free_port
from tests.fixtures.postgres import (
    MONITOR_PASSWORD,
    MONITOR_USER,
    Background,
    PgDatabase,
    queue_on_lock,
    wait_until,
)
from tests.fixtures.processes import LockwatchProcess, write_config

if TYPE_CHECKING:
    # The MCP SDK is imported where the tests use it: importing it costs some
    # 2 s of CPU, which every xdist worker paid again to collect this module.
    from mcp import Client
    from mcp.types import CallToolResult

pytestmark = pytest.mark.pg

USER = "agent"
DOWN_PASSWORD = "down-" + secrets.token_hex(8)  # in the DSN of a target that cannot be reached
T = TypeVar("T")
TOOLS = {"incidents", "incident", "explain_incident", "locks", "queues", "jobs"}


class SecuredLockwatch(LockwatchProcess):
    """A daemon that answers only over TLS, trusting the test's certificate."""

    def __init__(self, config: Path, log: Path, port: int, cert: Path, password: str) -> None:
        super().__init__(config, log, port)
        self.base = f"https://127.0.0.1:{port}"
        self.cert = cert
        self.password = password

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"lockwatch exited with {self.proc.returncode}:\n{self.log()}")
        try:
            return requests.get(
                f"{self.base}/healthz", auth=(USER, self.password), timeout=2, verify=str(self.cert)
            ).ok
        except requests.ConnectionError:
            return False


@dataclass
class Convoy:
    daemon: SecuredLockwatch
    password: str
    holder: int
    waiters: tuple[int, ...]
    incident: str  # the convoy's incident
    down: str  # the unreachable target's incident

    def client(self, password: str | None = None) -> ApiClient:
        return ApiClient(self.daemon.base, USER, password or self.password, str(self.daemon.cert))

    def api(self, path: str) -> Any:
        return requests.get(
            self.daemon.base + path,
            auth=(USER, self.password),
            verify=str(self.daemon.cert),
            timeout=5,
        ).json()


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


@pytest.fixture(scope="module")
def convoy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Convoy]:
    tmp = tmp_path_factory.mktemp("mcp")
    with LocalCluster(embedded_bin_dir()) as server:
        server.create_password_role(MONITOR_USER, MONITOR_PASSWORD, "pg_monitor")
        db = PgDatabase(server)
        cert, key = certificate(tmp)
        password = "agent-" + secrets.token_hex(8)
        hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=10)).decode()
        (tmp / "web.yml").write_text(
            f"tls_server_config:\n  cert_file: {cert.name}\n  key_file: {key.name}\n"
            f"basic_auth_users:\n  {USER}: '{hashed}'\n"
        )
        down = f"host=127.0.0.1 port={free_port()} user=app password={DOWN_PASSWORD}"
        port = free_port()
        config = write_config(tmp, port, {"main": db.monitor_dsn, "gone": down})
        with config.open("a") as extra:
            extra.write(f"web_config: {tmp / 'web.yml'}\n")
        daemon = SecuredLockwatch(config, tmp / "lockwatch.log", port, cert, password)
        holder = db.connect("webhook-worker-1")
        holder.execute("SELECT pg_advisory_lock(4301)")
        waiting: list[Background[None]] = [
            queue_on_lock(db.connect(f"webhook-worker-{n}"), 4301) for n in (2, 3)
        ]
        try:
            daemon.start()
            yield _convoy(daemon, password, holder, db)
        finally:
            daemon.stop()
            db.close()
            for waiter in waiting:
                waiter.join()


def _convoy(
    daemon: SecuredLockwatch, password: str, holder: psycopg.Connection[Any], db: PgDatabase
) -> Convoy:
    pid = holder.info.backend_pid
    with db.connect("admin") as admin:
        waiters = wait_until(
            lambda: (
                tuple(
                    r[0]
                    for r in admin.execute(
                        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                    ).fetchall()
                )
                if len(
                    admin.execute(
                        "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                    ).fetchall()
                )
                == 2
                else None
            ),
            message="two waiters queued",
        )
    probe = Convoy(daemon, password, pid, waiters, "", "")

    def opened() -> tuple[str, str] | None:
        found = probe.api("/api/v1/incidents?state=open")["incidents"]
        # Open with both its findings: the convoy fires first, the long hold
        # once max_hold has passed, a poll or more later on a busy machine.
        kinds = {"lock_convoy", "lock_held_too_long"}
        convoy = [
            i
            for i in found
            if i["root"]["pid"] == pid
            and i["waiters"] == 2
            and {f["kind"] for f in i["findings"]} >= kinds
        ]
        down = [i for i in found if i["target"] == "gone"]
        return (convoy[0]["id"], down[0]["id"]) if convoy and down else None

    probe.incident, probe.down = wait_until(opened, timeout=60, message="both incidents open")
    return probe


def run(call: Callable[[Client], Awaitable[T]], server: Any) -> T:
    from mcp import Client

    async def main() -> T:
        async with Client(server) as client:
            return await call(client)

    return anyio.run(main)


def text(result: CallToolResult) -> str:
    from mcp.types import TextContent

    (block,) = result.content
    assert isinstance(block, TextContent)
    return block.text


def test_the_tools_are_the_read_only_ones_and_say_so(convoy: Convoy) -> None:
    tools = run(lambda client: client.list_tools(), build_server(convoy.client())).tools
    assert {tool.name for tool in tools} == TOOLS
    for tool in tools:
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is True
        assert tool.annotations.destructive_hint is False


def test_an_agent_lists_and_reads_the_convoy_s_incident(convoy: Convoy) -> None:
    async def read(client: Client) -> tuple[CallToolResult, ...]:
        return (
            await client.call_tool("incidents", {"state": "open"}),
            await client.call_tool("incident", {"incident_id": convoy.incident}),
            await client.call_tool("explain_incident", {"incident_id": convoy.incident}),
            await client.call_tool("incident", {"incident_id": "nope"}),
        )

    listed, whole, explained, missing = run(read, build_server(convoy.client()))
    assert not listed.is_error and not whole.is_error
    ids = [i["id"] for i in listed.structured_content["incidents"]]
    assert convoy.incident in ids and convoy.down in ids
    incident = whole.structured_content
    assert incident["root"]["pid"] == convoy.holder
    assert {f["kind"] for f in incident["findings"]} >= {"lock_convoy", "lock_held_too_long"}
    said = text(explained)
    assert f"pid {convoy.holder}" in said
    assert "2 session(s) wait now" in said
    assert "runs no SQL while it holds them" in said
    assert f"lockwatch terminate -c <config> {convoy.incident}" in said
    assert missing.is_error and "no incident 'nope' is kept" in text(missing)


def test_an_incident_reads_as_the_api_serves_it_with_its_secrets_redacted_there(
    convoy: Convoy,
) -> None:
    result = run(
        lambda client: client.call_tool("incident", {"incident_id": convoy.down}),
        build_server(convoy.client()),
    )
    through_mcp = result.structured_content
    through_api = convoy.api(f"/api/v1/incidents/{convoy.down}")["incident"]
    for each in (through_mcp, through_api):
        each.pop("updated_at")  # moves on with each poll
    # How long the target has been down grows with each poll too: the API,
    # asked second, may have seen one more.
    down = [
        [finding["evidence"].pop("down_seconds") for finding in each["findings"]]
        for each in (through_mcp, through_api)
    ]
    assert all(first <= second for first, second in zip(*down, strict=True)), down
    assert through_mcp["findings"] == through_api["findings"]
    assert through_mcp["title"] == through_api["title"]
    assert DOWN_PASSWORD not in str(result)
    assert "app@127.0.0.1" in str(through_mcp["findings"])  # the error about that very DSN


def test_the_locks_come_as_a_tree_of_the_holder_and_its_waiters(convoy: Convoy) -> None:
    result = run(
        lambda client: client.call_tool("locks", {"target": "main"}),
        build_server(convoy.client()),
    )
    (main,) = result.structured_content["targets"]
    (root,) = [node for node in main["tree"] if node["pid"] == convoy.holder]
    assert [held["lock"].rsplit("/", 1)[1] for held in root["holds"]] == ["4301"]
    assert sorted(child["pid"] for child in root["blocked"]) == sorted(convoy.waiters)
    assert all(child["waits_for"]["lock"] == root["holds"][0]["lock"] for child in root["blocked"])


def test_a_wrong_password_is_refused_and_not_repeated(convoy: Convoy) -> None:
    wrong = "wrong-" + secrets.token_hex(6)
    result = run(lambda client: client.call_tool("queues", {}), build_server(convoy.client(wrong)))
    assert result.is_error and "401" in text(result)
    assert wrong not in text(result)


def test_the_real_lockwatch_mcp_process_answers_over_stdio(convoy: Convoy, tmp_path: Path) -> None:
    from mcp import StdioServerParameters

    secret = tmp_path / "password"
    secret.write_text(convoy.password + "\n")
    process = StdioServerParameters(
        command=sys.executable,
        args=[
            *("-m", "lockwatch", "mcp", "--url", convoy.daemon.base, "--user", USER),
            *("--password-file", str(secret), "--ca-file", str(convoy.daemon.cert)),
        ],
    )

    async def read(client: Client) -> tuple[CallToolResult, CallToolResult, CallToolResult]:
        return (
            await client.call_tool("incidents", {"state": "open", "target": "main"}),
            await client.call_tool("queues", {}),
            await client.call_tool("jobs", {}),
        )

    listed, queues, jobs = run(read, process)
    assert [i["id"] for i in listed.structured_content["incidents"]] == [convoy.incident]
    assert {t["target"] for t in queues.structured_content["targets"]} == {"main", "gone"}
    assert "targets" in jobs.structured_content or "jobs" in jobs.structured_content

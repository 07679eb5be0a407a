"""Command line: ``lockwatch run|check-config|snapshot|demo|export``."""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

import click

from lockwatch import __version__
from lockwatch.config.load import ConfigError, load_settings, settings_from_flags
from lockwatch.config.web import load_web_config
from lockwatch.settings.fields import parse_duration
from lockwatch.settings.targets import DEFAULT_LISTEN, Settings, parse_listen
from lockwatch.settings.web import WebConfig, WebConfigError

EXIT_BAD_CONFIG = 2


class Duration(click.ParamType):  # type: ignore[type-arg]
    """A duration flag: ``500ms``, ``5s``, ``2m``, ``1h``, in seconds."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float):
            return value
        try:
            return parse_duration(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


DURATION = Duration()


class ListenAddress(click.ParamType):  # type: ignore[type-arg]
    """``HOST:PORT``, IPv6 hosts in brackets."""

    name = "host:port"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            parse_listen(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        return str(value)


LISTEN = ListenAddress()


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _settings_from_file(
    path: Path, listen: str | None, state_dir: Path | None, web: WebConfig | None = None
) -> Settings:
    settings = load_settings(path)
    if listen is None and state_dir is None and web is None:
        return settings
    return replace(
        settings,
        listen=listen or settings.listen,
        state_dir=state_dir or settings.state_dir,
        web=web or settings.web,
    )


def _web_config(path: Path) -> WebConfig:
    try:
        return load_web_config(path)
    except WebConfigError as exc:
        click.echo(str(exc), err=True)
        sys.exit(EXIT_BAD_CONFIG)


def _fail_config(error: ConfigError) -> NoReturn:
    click.echo(str(error), err=True)
    sys.exit(EXIT_BAD_CONFIG)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lockwatch")
def main() -> None:
    """Watch PostgreSQL advisory locks: long holds, convoys, orphans, wrong holders."""


@main.command()
@click.option(
    "-c", "--config", "config_file", type=click.Path(path_type=Path), help="YAML config file."
)
@click.option(
    "--dsn",
    envvar="LOCKWATCH_DSN",
    help="Database to watch, without a config file (or set LOCKWATCH_DSN, which keeps the password out of ps).",
)
@click.option(
    "--listen",
    type=LISTEN,
    default=None,
    help=f"HOST:PORT for /metrics and the API [default: {DEFAULT_LISTEN}].",
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
    help="Where hold times and findings survive restarts.",
)
@click.option(
    "--web-config",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="TLS and basic auth, in the web-config file format of Prometheus exporters.",
)
@click.option(
    "--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info"
)
def run(
    config_file: Path | None,
    dsn: str | None,
    listen: str | None,
    interval: float | None,
    max_hold: float | None,
    orphan_after: float | None,
    convoy_waiters: int | None,
    state_dir: Path | None,
    web_config: Path | None,
    log_level: str,
) -> None:
    """Run the daemon: poll, detect, serve /metrics, the API and the status page.

    SIGHUP reloads the config file; SIGTERM stops after saving state.
    """
    dsn_source = click.get_current_context().get_parameter_source("dsn")
    if config_file is not None and dsn_source is click.core.ParameterSource.COMMANDLINE:
        raise click.UsageError(
            "--dsn and -c/--config exclude each other: targets go in the config file"
        )
    flags_used = any(v is not None for v in (interval, max_hold, orphan_after, convoy_waiters))
    if config_file is not None and flags_used:
        raise click.UsageError("lock flags go in the config file when -c/--config is given")
    if config_file is None and dsn is None:
        raise click.UsageError("give a config file (-c lockwatch.yml) or a database (--dsn DSN)")
    # SIGHUP reads the file again, and the flags still win over it.
    web = _web_config(web_config) if web_config is not None else None
    reload: Callable[[], Settings] | None = None
    if config_file is not None:
        reload = functools.partial(_settings_from_file, config_file, listen, state_dir, web)
    try:
        if reload is not None:
            settings = reload()
        else:
            assert dsn is not None
            settings = settings_from_flags(
                dsn=dsn,
                listen=listen,
                interval=interval,
                max_hold=max_hold,
                orphan_after=orphan_after,
                convoy_waiters=convoy_waiters,
                state_dir=state_dir,
            )
            settings = replace(settings, web=web)
    except ConfigError as exc:
        _fail_config(exc)
    _setup_logging(log_level)
    from lockwatch.daemon import Daemon

    try:
        daemon = Daemon(settings, reload=reload)
        daemon.run_forever()
    except OSError as exc:
        click.echo(f"lockwatch: {exc}", err=True)
        sys.exit(1)


@main.command("check-config")
@click.argument("config_file", type=click.Path(path_type=Path))
def check_config(config_file: Path) -> None:
    """Validate a config file; report every problem; exit 2 if there is any."""
    try:
        settings = load_settings(config_file)
    except ConfigError as exc:
        _fail_config(exc)
    named = sum(len(t.locks.named) for t in settings.targets)
    click.echo(f"{config_file}: ok ({len(settings.targets)} target(s), {named} named lock(s))")


@main.command("notify-test")
@click.option(
    "-c",
    "--config",
    "config_file",
    type=click.Path(path_type=Path),
    required=True,
    help="YAML config file with a notify section.",
)
@click.option(
    "--channel", "channels", multiple=True, help="Only this channel (repeatable) [default: all]."
)
def notify_test(config_file: Path, channels: tuple[str, ...]) -> None:
    """Send a test message through each notify channel and show what each answered.

    Exits 1 when any channel failed, 2 when the config has problems.
    """
    from lockwatch.notify.service import send_test

    try:
        settings = load_settings(config_file)
    except ConfigError as exc:
        _fail_config(exc)
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
@click.option("--dsn", envvar="LOCKWATCH_DSN", required=True, help="Database to look at.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--statement-timeout", type=DURATION, default=5.0, show_default=True)
def snapshot(dsn: str, as_json: bool, statement_timeout: float) -> None:
    """Print the advisory locks held and awaited right now, with their sessions."""
    from lockwatch.commands.snapshot import render_snapshot, take_snapshot

    try:
        settings = settings_from_flags(dsn=dsn)
    except ConfigError as exc:
        _fail_config(exc)
    target = settings.targets[0]
    try:
        view = take_snapshot(target, statement_timeout=statement_timeout)
    except RuntimeError as exc:
        click.echo(f"lockwatch: {exc}", err=True)
        sys.exit(1)
    if as_json:
        from lockwatch.publish.api.locks import locks_document

        assert view.status is not None
        click.echo(json.dumps(locks_document((view,), view.status.checked_at), indent=2))
    else:
        click.echo(render_snapshot(view))


@main.command()
@click.option("--dsn", default=None, help="Replay against this server instead of a throwaway one.")
@click.option(
    "--duration", type=DURATION, default=None, help="Stop after this long [default: until Ctrl-C]."
)
@click.option(
    "--listen",
    type=LISTEN,
    default=DEFAULT_LISTEN,
    show_default=True,
    help="HOST:PORT for /metrics and the API.",
)
@click.option(
    "--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="warning"
)
def demo(dsn: str | None, duration: float | None, listen: str, log_level: str) -> None:
    """Replay the seed incidents (a lock convoy, an orphaned lock) and show what lockwatch finds."""
    _setup_logging(log_level)
    from lockwatch.demo.run import run_demo

    sys.exit(run_demo(dsn=dsn, duration=duration, listen=listen))


@main.command("export")
@click.argument("what", type=click.Choice(["rules", "dashboard", "systemd"]))
@click.argument("directory", type=click.Path(path_type=Path, file_okay=False))
@click.option("--force", is_flag=True, help="Overwrite files that exist with other content.")
def export_command(what: str, directory: Path, force: bool) -> None:
    """Write the bundled Prometheus alert rules, Grafana dashboard or systemd unit into DIRECTORY."""
    from lockwatch.commands.export import ExportError, export

    try:
        written = export(what, directory, force=force)
    except (ExportError, OSError) as exc:
        click.echo(f"lockwatch: {exc}", err=True)
        sys.exit(1)
    for path in written:
        click.echo(str(path))


@main.command("exec", context_settings={"ignore_unknown_options": True})
@click.option("--job", required=True, help="The job's name, as configured under jobs.")
@click.option(
    "--run-key", default=None, help="What makes two runs the same run (default: the schedule slot)."
)
@click.option(
    "--url",
    envvar="LOCKWATCH_URL",
    default=f"http://{DEFAULT_LISTEN}",
    show_default=True,
    help="lockwatch's address (or set LOCKWATCH_URL).",
)
@click.option(
    "--token-file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="File holding the ping token (or set LOCKWATCH_PING_TOKEN).",
)
@click.option("--host", default=None, help="The host name to report [default: this host's name].")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def exec_command(
    job: str,
    run_key: str | None,
    url: str,
    token_file: Path | None,
    host: str | None,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND and report its start and its end to lockwatch: lockwatch exec --job nightly -- ./report.sh"""
    import os

    from lockwatch.commands.exec import PingClient, run_wrapped

    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise click.BadParameter(
                f"cannot read {token_file}: {exc.strerror}", param_hint="--token-file"
            ) from None
    else:
        token = os.environ.get("LOCKWATCH_PING_TOKEN", "")
    if not token:
        raise click.UsageError("no ping token: give --token-file or set LOCKWATCH_PING_TOKEN")
    client = PingClient(url=url, token=token, job=job, stderr=sys.stderr)
    sys.exit(run_wrapped(command, client=client, run_key=run_key, host=host))


@main.command()
@click.option(
    "--dsn",
    envvar="LOCKWATCH_DSN",
    required=True,
    help="The connection string your application uses.",
)
def doctor(dsn: str) -> None:
    """Check whether a DSN is safe for session state (exit 0), pooled per transaction (1), or broken (2)."""
    from lockwatch.commands.doctor import EXIT_ERROR, diagnose

    try:
        diagnosis = diagnose(dsn)
    except RuntimeError as exc:
        click.echo(f"lockwatch doctor: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    click.echo(diagnosis.render())
    sys.exit(diagnosis.exit_code)

"""The click parameter types of lockwatch's command-line flags.

Each checks a value as the settings do, importing their checks when it
converts one: declaring a flag (``lockwatch --help``) loads no settings."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from lockwatch.settings.sharding import Shard, parse_shard
from lockwatch.settings.web import DEFAULT_LISTEN

FC = TypeVar("FC", bound=Callable[..., Any])


class Duration(click.ParamType):  # type: ignore[type-arg]
    """A duration flag: ``500ms``, ``5s``, ``2m``, ``1h``, in seconds."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float):
            return value
        from lockwatch.settings.fields import parse_duration

        try:
            return parse_duration(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


DURATION = Duration()


class ExternalUrl(click.ParamType):  # type: ignore[type-arg]
    """``--web.external-url``: an http(s) URL with a host, without ?query or #fragment."""

    name = "url"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from lockwatch.settings.targets import check_external_url

        problem = check_external_url(str(value))
        if problem is not None:
            self.fail(problem, param, ctx)
        return str(value)


EXTERNAL_URL = ExternalUrl()

# What the HTTP server answers itself: no telemetry path may hide one.
RESERVED_PATHS = (
    "/",
    "/healthz",
    "/runbooks",
    *(f"/api/v1/{n}" for n in ("findings", "locks", "queues", "jobs", "sd")),
)


class TelemetryPath(click.ParamType):  # type: ignore[type-arg]
    """``--web.telemetry-path``: starts with /, and is none of the reserved paths."""

    name = "path"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        if not str(value).startswith("/") or value in RESERVED_PATHS:
            self.fail(
                f"must start with / and not be one of {', '.join(RESERVED_PATHS)}, got {value!r}",
                param,
                ctx,
            )
        return str(value)


TELEMETRY_PATH = TelemetryPath()


class ListenAddress(click.ParamType):  # type: ignore[type-arg]
    """``HOST:PORT``, IPv6 hosts in brackets; ``:PORT`` is every interface, ``[::]:PORT``.

    >>> LISTEN.convert(":10057", None, None), LISTEN.convert("127.0.0.1:0", None, None)
    ('[::]:10057', '127.0.0.1:0')
    """

    name = "host:port"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if text.startswith(":"):
            text = f"[::]{text}"
        from lockwatch.settings.targets import parse_listen

        try:
            parse_listen(text)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        return text


LISTEN = ListenAddress()


class DsnParam(click.ParamType):  # type: ignore[type-arg]
    """A DSN given on the command line, refused as the config refuses it (an
    unencoded '@' in the password, a bad port...), in words that never quote
    it: a command must not connect to the password's tail taken for a host.

    >>> DSN.convert("postgresql://app:pw@db/app", None, None)
    'postgresql://app:pw@db/app'
    """

    name = "dsn"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from lockwatch.settings.fields import check_dsn

        problem = check_dsn(str(value))
        if problem is not None:
            self.fail(f"the DSN {problem}", param, ctx)
        return str(value)


DSN = DsnParam()


class ShardParam(click.ParamType):  # type: ignore[type-arg]
    """``i/n``, or a StatefulSet pod's name and n: ``$(POD_NAME)/3`` gives ``lockwatch-2/3``.

    >>> SHARD.convert("lockwatch-2/3", None, None)
    Shard(index=2, count=3)
    """

    name = "i/n"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> Shard:
        if isinstance(value, Shard):
            return value
        try:
            return parse_shard(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


SHARD = ShardParam()


def required_config(help_text: str) -> Callable[[FC], FC]:
    """``-c/--config FILE``, required, for a command that reads lockwatch's config."""
    return click.option(
        "-c",
        "--config",
        "config_file",
        type=click.Path(path_type=Path),
        required=True,
        help=help_text,
    )


def daemon_url(help_text: str) -> Callable[[FC], FC]:
    """``--url``, the running lockwatch's address (``LOCKWATCH_URL``), for a
    command that talks to the daemon's API."""
    return click.option(
        "--url",
        envvar="LOCKWATCH_URL",
        default=f"http://{DEFAULT_LISTEN}",
        show_default=True,
        help=help_text,
    )

"""YAML or command-line flags -> frozen :class:`~lockwatch.settings.targets.Settings`.

The keys of the file are the fields of the settings dataclasses; the section
modules (:mod:`~lockwatch.config.targets`, :mod:`~lockwatch.config.queues`,
:mod:`~lockwatch.config.jobs`, :mod:`~lockwatch.config.notify`,
:mod:`~lockwatch.config.web`) hold what the YAML spells otherwise, and
:mod:`~lockwatch.config.reader` turns every problem into
``file:line: dotted.path: what is wrong``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from lockwatch.config.discovery import check_fleet, defaults_by_field, discovery_shapes
from lockwatch.config.jobs import Jobs
from lockwatch.config.keys import field_key, file_keys
from lockwatch.config.notify import check_sender_election, notify_shapes
from lockwatch.config.queues import Queues
from lockwatch.config.reader import ConfigError, ConfigProblem, Reading, Shape, finished, message_of
from lockwatch.config.targets import Targets
from lockwatch.config.web import read_web_config
from lockwatch.config.yamldata import FAILED, YamlMap
from lockwatch.settings.jobs import PingSettings
from lockwatch.settings.locks import LockSettings
from lockwatch.settings.targets import Settings, Target

__all__ = ["ConfigError", "ConfigProblem", "load_settings", "settings_from_flags"]

COMMAND_LINE = "<command line>"
DEFAULT_TARGET = "default"


class _DocumentShape(Shape):
    """The top level: ``defaults`` first, then ``pings`` and ``state_dir`` for the jobs."""

    def __init__(self, targets: Targets, jobs: Jobs, replica: str | None) -> None:
        self.targets = targets
        self.jobs = jobs
        self.replica = replica  # --replica, over the file's

    def keys(self, reading: Reading, cls: type[Any], raw: YamlMap) -> Collection[str]:
        return [*file_keys(cls), "defaults"]

    def before(self, reading: Reading, raw: YamlMap, data: dict[str, object]) -> dict[str, object]:
        data["source"] = reading.source
        if "defaults" in data:
            self.targets.read_defaults(reading, data.pop("defaults"))
            data["target_defaults"] = defaults_by_field(self.targets.inherited)
        web = field_key(Settings, "web").key
        if web in data:
            data[web] = read_web_config(reading, data[web], (web,))
        if "pings" in data:
            data["pings"] = pings = reading.value(PingSettings, data["pings"], ("pings",))
            self.jobs.pings = PingSettings() if pings is FAILED else pings
        self.jobs.state_dir = "state_dir" in data
        if self.replica is not None:
            data["replica"] = self.replica
        return data

    def after(self, reading: Reading, raw: YamlMap, value: Any) -> Any:
        check_fleet(reading, value)
        check_sender_election(reading, value, self.replica)
        return value


def load_settings(
    path: Path, environ: Mapping[str, str] | None = None, *, replica: str | None = None
) -> Settings:
    """Read and validate a config file; raise :class:`ConfigError` with every
    problem. ``replica``: ``--replica``, checked as if the file said it."""
    path = Path(path)
    queues, jobs = Queues(), Jobs()
    targets = Targets(queues)
    shapes = {
        Settings: _DocumentShape(targets, jobs, replica),
        **targets.shapes(),
        **queues.shapes(),
        **jobs.shapes(),
        **notify_shapes(),
        **discovery_shapes(),
    }
    reading = Reading(path, environ, shapes)
    document = reading.document()
    settings = FAILED if document is None else reading.value(Settings, document, ())
    if reading.problems or not isinstance(settings, Settings):
        raise reading.error()
    return settings


# each flag and the field it sets
_FLAGS: dict[str, tuple[type, str]] = {
    "--dsn": (Target, "dsn"),
    "--listen": (Settings, "listen"),
    "--interval": (Target, "interval"),
    "--max-hold": (LockSettings, "max_hold"),
    "--orphan-after": (LockSettings, "orphan_after"),
    "--convoy-waiters": (LockSettings, "convoy_waiters"),
    "--state-dir": (Settings, "state_dir"),
}


def settings_from_flags(
    *,
    dsn: str,
    listen: str | None = None,
    interval: float | None = None,
    max_hold: float | None = None,
    orphan_after: float | None = None,
    convoy_waiters: int | None = None,
    state_dir: Path | None = None,
) -> Settings:
    """The zero-config quick start: one target named ``default``."""
    given = {
        "--dsn": dsn,
        "--listen": listen,
        "--interval": interval,
        "--max-hold": max_hold,
        "--orphan-after": orphan_after,
        "--convoy-waiters": convoy_waiters,
        "--state-dir": state_dir,
    }
    values: dict[tuple[type, str], Any] = {}
    problems = []
    for flag, value in given.items():
        if value is None:
            continue
        cls, name = _FLAGS[flag]
        try:
            values[cls, name] = field_key(cls, name).adapter.validate_python(value)
        except ValidationError as exc:
            problems += [
                ConfigProblem(COMMAND_LINE, flag, None, message_of(e)) for e in exc.errors()
            ]
    if problems:
        raise finished(problems, [dsn] if dsn else [])

    def of(cls: type) -> dict[str, Any]:
        return {name: value for (owner, name), value in values.items() if owner is cls}

    target = Target(name=DEFAULT_TARGET, locks=LockSettings(**of(LockSettings)), **of(Target))
    return Settings(targets=(target,), **of(Settings))

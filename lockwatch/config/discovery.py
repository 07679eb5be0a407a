"""``target_sources:``, ``auth_modules:`` and ``shard:``: the checks that need
more than one field, or more than one section.

- A target source is a file or a URL: exactly one of ``file`` and ``url``.
- Its ``auth_module`` names one of ``auth_modules``.
- A config needs a target: one under ``targets:``, or a source to discover them.
"""

from __future__ import annotations

from typing import Any

from lockwatch.config.keys import keys_of
from lockwatch.config.reader import Reading, Shape
from lockwatch.config.yamldata import YamlMap
from lockwatch.settings.sources import TargetSource
from lockwatch.settings.targets import Settings, Target


class _SourceShape(Shape):
    def after(self, reading: Reading, raw: YamlMap, value: Any) -> Any:
        source: TargetSource = value
        if (source.file is None) == (source.url is None):
            reading.report(raw.loc, "needs exactly one of file (file_sd) and url (http_sd)")
        return source


def discovery_shapes() -> dict[type, Shape]:
    return {TargetSource: _SourceShape()}


def defaults_by_field(inherited: dict[str, object]) -> tuple[tuple[str, object], ...]:
    """``defaults:`` by the field names of :class:`Target` (discovered targets get them)."""
    names = {key.key: key.name for key in keys_of(Target)}
    return tuple((names[key], value) for key, value in inherited.items())


def check_fleet(reading: Reading, settings: Settings) -> None:
    if not settings.targets and not settings.target_sources:
        reading.report(("targets",), "needs at least one target (or target_sources to find them)")
    modules = {module.name for module in settings.auth_modules}
    for index, source in enumerate(settings.target_sources):
        if source.auth_module not in modules:
            known = ", ".join(sorted(modules)) or "none is configured"
            reading.report(
                ("target_sources", index, "auth_module"),
                f"no auth module named {source.auth_module!r} (auth_modules: {known})",
            )

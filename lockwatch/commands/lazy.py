"""A click group whose commands' modules are imported only when one runs.

Each lockwatch process starts through the command line, and a command's
module pulls in what it needs (psycopg, pydantic, the settings and the
models): ``lockwatch --help`` or ``lockwatch export`` should not pay for
``terminate``'s. The group's listing shows each lazy command by the summary
it is declared with here, which tests/unit/test_cli_lazy.py holds equal to
the command's own."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import click


@dataclass(frozen=True, slots=True)
class LazyCommand:
    """Where a command is (``module:attribute``) and its one-line summary."""

    where: str
    summary: str

    def load(self) -> click.Command:
        module, _, attribute = self.where.partition(":")
        command = getattr(importlib.import_module(module), attribute)
        assert isinstance(command, click.Command), self.where
        return command


class LazyGroup(click.Group):
    """A group of commands declared in it, and of ``lazy`` ones imported when
    they are invoked (or asked for their own help)."""

    def __init__(self, *args: Any, lazy: Mapping[str, LazyCommand], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy)
        self._listing = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.lazy:
            return super().get_command(ctx, cmd_name)
        if self._listing:  # the group's help: a stand-in with the summary
            return click.Command(cmd_name, help=self.lazy[cmd_name].summary)
        return self.lazy[cmd_name].load()

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_commands(ctx, formatter)
        finally:
            self._listing = False

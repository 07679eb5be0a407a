"""``lockwatch export rules|dashboard|systemd|runbooks|config DIR`` and ``lockwatch
export config``: the files an operator installs next to the daemon, written
out from the ones lockwatch carries (``util/bundled.py``), and the annotated
example config, printed, to start a config file from.
"""

from __future__ import annotations

import fnmatch
import sys
from collections.abc import Iterator
from importlib.resources.abc import Traversable
from pathlib import Path

import click

from lockwatch.util.bundled import BundleMissingError, bundle_root, bundled_doc

# What the operator asks for -> the directory that holds it.
BUNDLES = {
    "rules": "alerts",
    "dashboard": "grafana",
    "systemd": "systemd",
    "runbooks": "docs",
    "config": "docs",
}
EXAMPLE_CONFIG = "lockwatch.example.yml"
# Of a directory, only these files (absent: all of them).
ONLY = {"runbooks": ("runbooks.md",), "config": (EXAMPLE_CONFIG,)}
# promtool's unit tests of the rules travel with them but are not rules: a
# Prometheus that loads rules/*.yml would refuse to start on one.
LEFT_OUT = {"rules": ("*.test.yml", "*.test.yaml")}


class ExportError(Exception):
    pass


def example_config() -> str:
    """The annotated example config: every key, with its default."""
    try:
        return bundled_doc(EXAMPLE_CONFIG).decode("utf-8")
    except BundleMissingError as exc:
        raise ExportError(str(exc)) from None


def _walk(
    node: Traversable, prefix: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], Traversable]]:
    for child in sorted(node.iterdir(), key=lambda c: c.name):
        if child.name.startswith(".") or child.name == "__pycache__":
            continue
        if child.is_dir():
            yield from _walk(child, (*prefix, child.name))
        else:
            yield (*prefix, child.name), child


def bundle_files(what: str) -> list[tuple[Path, bytes]]:
    """(path relative to the bundle, content) of every file of one bundle."""
    try:
        root = bundle_root(BUNDLES[what])
    except BundleMissingError as exc:
        raise ExportError(str(exc)) from None
    only = ONLY.get(what)
    return [
        (Path(*parts), node.read_bytes())
        for parts, node in _walk(root, ())
        if not any(fnmatch.fnmatch(parts[-1], pattern) for pattern in LEFT_OUT.get(what, ()))
        and (only is None or "/".join(parts) in only)
    ]


def export(what: str, destination: Path, *, force: bool = False) -> list[Path]:
    """Write one bundle under ``destination``; files that exist with other
    content are left alone (and reported) unless ``force``."""
    files = bundle_files(what)
    if not files:
        raise ExportError(f"{BUNDLES[what]}/ is empty")
    conflicts = [
        destination / rel
        for rel, content in files
        if (destination / rel).exists() and (destination / rel).read_bytes() != content
    ]
    if conflicts and not force:
        shown = ", ".join(str(path) for path in conflicts)
        raise ExportError(f"would overwrite files that differ: {shown} (--force overwrites them)")
    written = []
    for rel, content in files:
        path = destination / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        written.append(path)
    return written


@click.command("export")
@click.argument("what", type=click.Choice(["rules", "dashboard", "systemd", "runbooks", "config"]))
@click.argument("directory", type=click.Path(path_type=Path, file_okay=False), required=False)
@click.option("--force", is_flag=True, help="Overwrite files that exist with other content.")
def export_command(what: str, directory: Path | None, force: bool) -> None:
    """Write the bundled Prometheus alert rules, Grafana dashboard, systemd unit,
    runbooks or example config into DIRECTORY.

    Without DIRECTORY, `lockwatch export config` prints the annotated example
    config (every key, with its default) to start a config file from:
    lockwatch export config > lockwatch.yml
    """
    if directory is None and what != "config":
        raise click.UsageError(f"export {what} needs a DIRECTORY to write into")
    try:
        if directory is None:
            click.echo(example_config(), nl=False)
            return
        written = export(what, directory, force=force)
    except (ExportError, OSError) as exc:
        click.echo(f"lockwatch: {exc}", err=True)
        sys.exit(1)
    for path in written:
        click.echo(str(path))

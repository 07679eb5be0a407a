"""``lockwatch export rules|dashboard|systemd DIR``: the files an operator
installs next to the daemon, written out from the ones lockwatch carries.

A wheel carries ``alerts/``, ``grafana/`` and ``systemd/`` inside the package
(``lockwatch/bundled/``, copied there at build time by ``setup.py``); a source
checkout, editable installs included, reads the repository's own top-level
directories, so each file has one source of truth.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

# What the operator asks for -> the directory that holds it.
BUNDLES = {"rules": "alerts", "dashboard": "grafana", "systemd": "systemd"}
# promtool's unit tests of the rules travel with them but are not rules: a
# Prometheus that loads rules/*.yml would refuse to start on one.
LEFT_OUT = {"rules": ("*.test.yml", "*.test.yaml")}
_CHECKOUT = Path(__file__).resolve().parents[2]  # lockwatch/commands/export.py -> the checkout


class ExportError(Exception):
    pass


def bundle_root(what: str) -> Traversable:
    directory = BUNDLES[what]
    packaged = resources.files("lockwatch") / "bundled" / directory
    if packaged.is_dir():
        return packaged
    checkout = _CHECKOUT / directory
    if (_CHECKOUT / "pyproject.toml").is_file() and checkout.is_dir():
        return checkout
    raise ExportError(f"this lockwatch installation carries no {directory}/ (a broken build?)")


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
    return [
        (Path(*parts), node.read_bytes())
        for parts, node in _walk(bundle_root(what), ())
        if not any(fnmatch.fnmatch(parts[-1], pattern) for pattern in LEFT_OUT.get(what, ()))
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

"""The files lockwatch carries besides its code: the alert rules, the Grafana
dashboard, the systemd unit, and the docs an operator needs without the
repository (the annotated example config, the runbooks).

A wheel carries the first three inside the package (``lockwatch/bundled/``,
copied there at build time by ``setup.py``); a source checkout, editable
installs included, reads the repository's own top-level directories. The docs
are ``lockwatch/docs/``: symbolic links to the repository's ``docs/`` files in
a checkout, the files themselves in a wheel (package data). Each file has one
source of truth.
"""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

# Of docs/, the package carries only these (its pictures and design notes stay
# in the repository): lockwatch/docs/ links to them.
BUNDLED_DOCS = ("lockwatch.example.yml", "runbooks.md")
_CHECKOUT = Path(__file__).resolve().parents[2]  # lockwatch/util/bundled.py -> the checkout


class BundleMissingError(LookupError):
    """The installation carries no such file or directory (a broken build?)."""


def bundle_root(directory: str) -> Traversable:
    """Where a bundled directory (alerts, grafana, systemd, docs) is, in the
    package or in the checkout."""
    if directory == "docs":
        return resources.files("lockwatch") / "docs"
    packaged = resources.files("lockwatch") / "bundled" / directory
    if packaged.is_dir():
        return packaged
    checkout = _CHECKOUT / directory
    if (_CHECKOUT / "pyproject.toml").is_file() and checkout.is_dir():
        return checkout
    raise BundleMissingError(
        f"this lockwatch installation carries no {directory}/ (a broken build?)"
    )


def bundled_doc(name: str) -> bytes:
    """One of ``BUNDLED_DOCS``: ``bundled_doc("runbooks.md")``."""
    if name not in BUNDLED_DOCS:
        raise BundleMissingError(f"docs/{name} is not carried (only {', '.join(BUNDLED_DOCS)})")
    node = bundle_root("docs") / name
    if not node.is_file():
        raise BundleMissingError(f"this lockwatch installation carries no docs/{name}")
    return node.read_bytes()

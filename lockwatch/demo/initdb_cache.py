"""One initdb for many throwaway clusters: its data directory kept and copied.

The tests start a hundred clusters a run; with ``LOCKWATCH_INITDB_CACHE`` set
to a directory, each server binary's initdb runs once there (one process at a
time, under a lock file) and every cluster after it starts from a copy. A
cluster's start and stop cost 1.2 s of CPU with initdb, 0.7 s with a copy
(39 MB, the WAL segment's zeros left as holes).

A copy must not be the template's twin: lockwatch tells servers apart by
``pg_control_system()``'s system identifier (model/servers.py), which initdb
draws once per cluster, so clusters copied from one template would look like
one server to a lockwatch reading two of them. ``new_system_identifier``
draws another for a copy that has never started, where PostgreSQL keeps it:
at the start of ``global/pg_control`` (under the CRC-32C that ends its
ControlFileData) and in the long header of each WAL segment's first page,
which the startup process compares with it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import secrets
import shutil
import struct
import subprocess
from collections.abc import Callable
from functools import cache
from pathlib import Path

from lockwatch.demo.pgbinaries import ClusterError, make_traversable

__all__ = ["INITDB_CACHE_ENV", "copy_initdb", "new_system_identifier"]

INITDB_CACHE_ENV = "LOCKWATCH_INITDB_CACHE"

# The identifier, a uint64, little-endian on the machines lockwatch runs on.
IDENTIFIER = struct.Struct("<Q")
CRC = struct.Struct("<I")
# Where a WAL segment's long page header keeps it: after xlp_magic, xlp_info,
# xlp_tli, xlp_pageaddr and xlp_rem_len (20 bytes, aligned to 24).
WAL_IDENTIFIER_AT = 24
# ControlFileData ends well within this; the file is padded to 8 kB.
CONTROL_DATA_MAX = 1024
CRC32C_POLYNOMIAL = 0x82F63B78  # Castagnoli, reflected


@cache
def _crc_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = crc >> 1 ^ CRC32C_POLYNOMIAL if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


def crc32c(data: bytes | bytearray) -> int:
    """CRC-32C as PostgreSQL computes it (its COMP_CRC32C).

    >>> hex(crc32c(b"123456789"))
    '0xe3069283'
    """
    table, crc = _crc_table(), 0xFFFFFFFF
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ crc >> 8
    return crc ^ 0xFFFFFFFF


def _crc_offset(control: bytes | bytearray) -> int:
    """Where pg_control's CRC is: its ControlFileData's size differs from one
    major version to another, and the CRC covers every byte before it."""
    for at in range(IDENTIFIER.size, CONTROL_DATA_MAX, CRC.size):
        if crc32c(control[:at]) == CRC.unpack_from(control, at)[0]:
            return at
    raise ClusterError("cannot find the CRC of pg_control: not a data directory this knows")


def new_system_identifier(data_dir: Path) -> int:
    """Give ``data_dir`` (a copy, never started) a system identifier of its
    own; returns it."""
    control_path = data_dir / "global" / "pg_control"
    control = bytearray(control_path.read_bytes())
    old = control[: IDENTIFIER.size]
    crc_at = _crc_offset(control)
    segments = sorted(p for p in (data_dir / "pg_wal").iterdir() if len(p.name) == 24)
    for segment in segments:
        with segment.open("rb") as wal:
            wal.seek(WAL_IDENTIFIER_AT)
            if wal.read(IDENTIFIER.size) != old:
                raise ClusterError(f"{segment} does not carry pg_control's system identifier")
    # Below 2**63: a bigint, as pg_control_system() shows it, stays positive.
    identifier = secrets.randbits(63) | 1 << 62
    new = IDENTIFIER.pack(identifier)
    control[: IDENTIFIER.size] = new
    CRC.pack_into(control, crc_at, crc32c(control[:crc_at]))
    for segment in segments:
        with segment.open("r+b") as wal:
            wal.seek(WAL_IDENTIFIER_AT)
            wal.write(new)
    with control_path.open("r+b") as file:
        file.write(control)
    return identifier


def copy_initdb(
    cache: Path,
    bin_dir: Path,
    owner: tuple[int, int] | None,
    initdb: Callable[[Path], None],
    data_dir: Path,
) -> None:
    """Make ``data_dir`` a copy of what ``initdb`` (of ``bin_dir``'s
    binaries, run as ``owner``: uid and gid, None for this process's user)
    makes, with a system identifier of its own; initdb runs only for the
    first such copy in ``cache``."""
    _copy(_template(cache, bin_dir, owner, initdb), data_dir)
    new_system_identifier(data_dir)


def _template(
    cache: Path, bin_dir: Path, owner: tuple[int, int] | None, initdb: Callable[[Path], None]
) -> Path:
    postgres = (bin_dir / "postgres").resolve()
    made = postgres.stat()
    uid = os.getuid() if owner is None else owner[0]
    key = f"{postgres}\0{made.st_size}\0{made.st_mtime_ns}\0{uid}".encode()
    home = cache / hashlib.sha256(key).hexdigest()[:16]
    home.mkdir(parents=True, exist_ok=True)
    template = home / "data"
    with (home / "lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not template.exists():
            # initdb, run as the server user, makes its data dir there.
            if owner is not None:
                make_traversable(home)
                os.chown(home, *owner)
            partial = home / "data.partial"
            shutil.rmtree(partial, ignore_errors=True)
            initdb(partial)
            partial.rename(template)
    return template


def _copy(template: Path, data_dir: Path) -> None:
    # cp -a keeps the files' owner (the server user) and modes (0700); the
    # WAL segment is mostly zeros, which need no pages of their own.
    proc = subprocess.run(
        ["cp", "-a", "--sparse=always", str(template), str(data_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise ClusterError(f"cannot copy {template} to {data_dir}: {proc.stderr.strip()}")

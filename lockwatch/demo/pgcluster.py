"""Throwaway PostgreSQL servers on 127.0.0.1, for the tests and for `lockwatch demo`.

A `LocalCluster` owns one temporary directory (data, Unix socket, server log) and
one free loopback port, which it keeps across restarts so that DSNs handed out
earlier stay valid. It never touches port 5432 or any cluster it did not create.
"""

from __future__ import annotations

import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from lockwatch.demo.initdb_cache import INITDB_CACHE_ENV, copy_initdb
from lockwatch.demo.pgbinaries import (
    ClusterError,
    major_version,
    make_traversable,
    server_user,
    share_install,
)

__all__ = [
    "HOST",
    "SCRAM_GROUP",
    "ClusterError",
    "LocalCluster",
    "free_port",
]


HOST = "127.0.0.1"


# Members of this role must log in with a password (scram) over TCP; all others are trusted.
SCRAM_GROUP = "lockwatch_password_auth"


RESERVED_PORTS = frozenset({5432})


START_TIMEOUT = 60


LOG_TAIL_LINES = 40


_HBA = f"""\
# Written by lockwatch.pgcluster: trust on loopback, except for password roles.
local all all trust
host all +{SCRAM_GROUP} 127.0.0.1/32 scram-sha-256
host all +{SCRAM_GROUP} ::1/128 scram-sha-256
host all all 127.0.0.1/32 trust
host all all ::1/128 trust
"""


_CONF_INCLUDE = "lockwatch.conf"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (never 5432).

    Chosen below the kernel's ephemeral range: a port from ``bind(0)`` is one
    the kernel also hands out as the source port of any outgoing connection,
    so between this check and the server's own bind a client (a test's
    psycopg or HTTP session) could take it. Ports below that range are given
    only to whoever asks for them by number."""
    low, high = _chosen_range or ports_below_ephemeral()
    while True:
        # A machine whose ephemeral range starts low leaves no room below it.
        port = _PORT_PICKER.randrange(low, high) if high > low else 0
        if port in RESERVED_PORTS or port in _ports_given:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((HOST, port))
            except OSError:
                continue
            port = int(sock.getsockname()[1])
        _ports_given.add(port)
        return port


# Above the well-known and registered services most machines run (up to 10000).
_FIRST_CHOSEN_PORT = 10000
# Seeded by the OS: two processes picking at once rarely pick alike.
_PORT_PICKER = random.SystemRandom()
# Never hand one process the same port twice: a server given it may not yet listen.
_ports_given: set[int] = set()


def choose_ports_from(low: int, high: int) -> None:
    """Make ``free_port`` pick in [low, high) in this process: processes that
    pick at once (the test suite's parallel workers) each given a range of
    their own never pick alike between one's check and its server's bind."""
    global _chosen_range  # noqa: PLW0603 - the process's one choice
    _chosen_range = (low, high)


_chosen_range: tuple[int, int] | None = None


def ports_below_ephemeral() -> tuple[int, int]:
    """The ports ``free_port`` picks from by default."""
    return _FIRST_CHOSEN_PORT, _ephemeral_range()[0]


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _proc_state(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of a live process, None once it is gone or a zombie."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name may contain spaces and parentheses; fields resume after the last ')'.
    fields = raw[raw.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return fields[0], int(fields[1])


def _children(pid: int) -> list[int]:
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            state = _proc_state(int(entry.name))
            if state is not None and state[1] == pid:
                children.append(int(entry.name))
    return children


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((HOST, port)) == 0


def _wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _quote_conf(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


@dataclass
class _Server:
    """Everything a cluster needs to stop and clean up, without a reference to the
    LocalCluster itself, so that a finalizer can run it when the cluster is lost."""

    bin_dir: Path
    root: Path
    settings: dict[str, str]
    user: pwd.struct_passwd | None
    port: int = field(default_factory=free_port)

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        return self.root / "server.log"

    @property
    def socket_dir(self) -> Path:
        return self.root / "sock"

    def run(self, tool: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        # Stray PG* variables (PGPORT, PGDATA...) would point the tools at another cluster,
        # and English messages let us recognise a port collision in the log.
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        as_user: dict[str, Any] = {}
        if self.user is not None:
            env["HOME"] = str(self.root)
            env["USER"] = env["LOGNAME"] = self.user.pw_name
            as_user = {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}
        return subprocess.run(
            [str(self.bin_dir / tool), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=self.root,
            check=False,
            **as_user,
        )

    def own(self, path: Path) -> None:
        if self.user is not None:
            os.chown(path, self.user.pw_uid, self.user.pw_gid)

    def log_tail(self, start: int = 0) -> str:
        try:
            with self.log_path.open("rb") as log:
                log.seek(start)
                text = log.read().decode(errors="replace")
        except FileNotFoundError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-LOG_TAIL_LINES:])

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def initialised(self) -> bool:
        return (self.data_dir / "PG_VERSION").exists()

    def initdb(self) -> None:
        cache = os.environ.get(INITDB_CACHE_ENV)
        if cache:
            owner = None if self.user is None else (self.user.pw_uid, self.user.pw_gid)
            copy_initdb(Path(cache), self.bin_dir, owner, self._initdb, self.data_dir)
        else:
            self._initdb(self.data_dir)
        (self.data_dir / "pg_hba.conf").write_text(_HBA)
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.write(f"\ninclude '{_CONF_INCLUDE}'\n")
        self.socket_dir.mkdir()
        self.own(self.socket_dir)

    def _initdb(self, data_dir: Path) -> None:
        proc = self.run(
            "initdb",
            "-D",
            str(data_dir),
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--locale=C",
            "--auth=trust",
            "--no-sync",
        )
        if proc.returncode != 0:
            raise ClusterError(f"initdb failed in {self.root}:\n{proc.stdout}{proc.stderr}")

    def write_conf(self) -> None:
        values = {
            "listen_addresses": HOST,
            "port": str(self.port),
            "unix_socket_directories": str(self.socket_dir),
            "fsync": "off",
            "max_connections": "300",
            # The default before PostgreSQL 14 is md5, which scram-sha-256 in pg_hba refuses.
            "password_encryption": "scram-sha-256",
            **self.settings,
        }
        conf = self.data_dir / _CONF_INCLUDE
        conf.write_text("".join(f"{key} = {_quote_conf(value)}\n" for key, value in values.items()))
        self.own(conf)

    def postmaster_pid(self) -> int | None:
        """The pid of the running postmaster of this data dir, if there is one."""
        try:
            first_line = (self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0]
        except FileNotFoundError:
            return None
        if not first_line.strip().isdigit():
            return None
        pid = int(first_line)
        return pid if _proc_state(pid) is not None else None

    def start(self) -> None:
        if self.postmaster_pid() is not None:
            return
        for attempt in range(2):
            self.write_conf()
            log_start = self.log_size()
            proc = self.run(
                "pg_ctl",
                "-D",
                str(self.data_dir),
                "-l",
                str(self.log_path),
                "-w",
                "-t",
                str(START_TIMEOUT),
                "start",
                timeout=START_TIMEOUT + 30,
            )
            if proc.returncode == 0:
                return
            tail = self.log_tail(log_start)
            if attempt == 0 and "Address already in use" in tail:
                # Someone took the port between free_port() and bind(): pick another once.
                self.port = free_port()
                continue
            raise ClusterError(
                f"PostgreSQL in {self.root} did not start on {HOST}:{self.port}: "
                f"{proc.stderr.strip() or proc.stdout.strip()}\n"
                f"--- tail of {self.log_path} ---\n{tail}"
            )

    def stop(self, mode: str) -> None:
        if self.postmaster_pid() is None:
            return
        proc = self.run(
            "pg_ctl", "-D", str(self.data_dir), "-m", mode, "-w", "-t", str(START_TIMEOUT), "stop"
        )
        if proc.returncode != 0 and self.postmaster_pid() is not None:
            raise ClusterError(
                f"PostgreSQL in {self.root} did not stop ({mode}): {proc.stderr.strip()}\n"
                f"--- tail of {self.log_path} ---\n{self.log_tail()}"
            )

    def kill(self) -> None:
        pid = self.postmaster_pid()
        if pid is None:
            return
        backends = _children(pid)
        os.kill(pid, signal.SIGKILL)
        if not _wait_for(lambda: _proc_state(pid) is None and not _port_open(self.port), 30):
            raise ClusterError(f"postmaster {pid} still holds {HOST}:{self.port} after SIGKILL")
        # Backends exit by themselves once they notice the postmaster died; a restart
        # refuses to run while any of them still holds the old shared memory.
        if not _wait_for(lambda: all(_proc_state(b) is None for b in backends), 10):
            for backend in backends:
                if _proc_state(backend) is not None:
                    os.kill(backend, signal.SIGKILL)
            _wait_for(lambda: all(_proc_state(b) is None for b in backends), 10)
        # An unreaped (zombie) postmaster still answers kill(pid, 0), which would make
        # the next postmaster believe the data dir and the socket are in use.
        (self.data_dir / "postmaster.pid").unlink(missing_ok=True)
        for lock in self.socket_dir.glob(".s.PGSQL.*.lock"):
            lock.unlink(missing_ok=True)

    def destroy(self) -> None:
        try:
            self.stop("fast")
        except (ClusterError, subprocess.TimeoutExpired):
            self.kill()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


class LocalCluster:
    """A throwaway PostgreSQL listening on 127.0.0.1 at a free port.

    Use as a context manager, or call start() and close(). Whatever happens,
    the server is stopped and its directory removed when the object is
    collected or the interpreter exits.
    """

    def __init__(
        self,
        bin_dir: Path,
        *,
        base_dir: Path | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self.bin_dir = Path(bin_dir)
        self.host = HOST
        self.major_version = major_version(self.bin_dir)
        user = server_user()
        if user is not None:
            share_install(self.bin_dir)
        root = Path(tempfile.mkdtemp(prefix="lockwatch-pg-", dir=base_dir))
        self._server = _Server(self.bin_dir, root, dict(settings or {}), user)
        self._finalizer = weakref.finalize(self, self._server.destroy)
        if user is not None:
            make_traversable(root.parent)
            self._server.own(root)
        socket_path = self._server.socket_dir / ".s.PGSQL.65535"
        # sockaddr_un.sun_path holds 107 bytes on Linux.
        if len(os.fsencode(socket_path)) > 107:
            self.close()
            raise ClusterError(f"base_dir is too deep for a Unix socket path: {socket_path}")

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def directory(self) -> Path:
        return self._server.root

    @property
    def log_path(self) -> Path:
        return self._server.log_path

    @property
    def running(self) -> bool:
        return self._server.postmaster_pid() is not None

    @property
    def postmaster_pid(self) -> int | None:
        return self._server.postmaster_pid()

    def start(self) -> None:
        if not self._finalizer.alive:
            raise ClusterError("this cluster has been closed")
        fresh = not self._server.initialised()
        if fresh:
            self._server.initdb()
        self._server.start()
        if fresh:
            with psycopg.connect(self.dsn(), autocommit=True) as conn:
                conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(SCRAM_GROUP)))

    def stop(self, mode: str = "fast") -> None:
        if mode not in ("smart", "fast", "immediate"):
            raise ValueError(f"unknown shutdown mode {mode!r}")
        self._server.stop(mode)

    def kill(self) -> None:
        """SIGKILL the postmaster, as a crash would, and wait until its port is closed."""
        self._server.kill()

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self._finalizer()

    def dsn(
        self,
        dbname: str = "postgres",
        user: str = "postgres",
        password: str | None = None,
        **params: str,
    ) -> str:
        if password is not None:
            params["password"] = password
        return make_conninfo(
            "", host=self.host, port=str(self.port), dbname=dbname, user=user, **params
        )

    def create_password_role(self, name: str, password: str, *grants: str) -> None:
        """A LOGIN role that must authenticate with its password (scram), granted `grants`."""
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} IN ROLE {}").format(
                    sql.Identifier(name), sql.Literal(password), sql.Identifier(SCRAM_GROUP)
                )
            )
            for granted in grants:
                conn.execute(
                    sql.SQL("GRANT {} TO {}").format(sql.Identifier(granted), sql.Identifier(name))
                )

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LocalCluster(PostgreSQL {self.major_version} at {self.host}:{self.port}, {self.directory})"

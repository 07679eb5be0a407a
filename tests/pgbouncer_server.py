"""A real pgbouncer (Debian's package) in front of a test server, on a free loopback port."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import psycopg
from psycopg.conninfo import make_conninfo

from lockwatch.demo.pgcluster import LocalCluster, free_port

PGBOUNCER = "/usr/sbin/pgbouncer"
ADMIN_USER = "postgres"
STATS_USER = "lockwatch_stats"


def pgbouncer_binary() -> str:
    found = shutil.which("pgbouncer") or (PGBOUNCER if Path(PGBOUNCER).exists() else None)
    if found is None:
        raise RuntimeError("pgbouncer is not installed: run scripts/bootstrap, which installs it")
    return found


class PgBouncer:
    """pgbouncer with trust auth on 127.0.0.1, pooling every database of ``server``.

    ``pool_size`` is kept small so that clients really share server connections,
    which is the whole point of the incidents replayed through it.
    """

    def __init__(
        self, server: LocalCluster, *, pool_mode: str = "transaction", pool_size: int = 2
    ) -> None:
        self.server = server
        self.pool_mode = pool_mode
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="lockwatch-pgbouncer-"))
        self._user = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
        users = [ADMIN_USER, STATS_USER, "app", "scheduler"]
        (self.dir / "userlist.txt").write_text("".join(f'"{user}" ""\n' for user in users))
        (self.dir / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={server.host} port={server.port}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\n"
            f"unix_socket_dir = {self.dir}\n"
            "auth_type = trust\n"
            f"auth_file = {self.dir / 'userlist.txt'}\n"
            f"pool_mode = {pool_mode}\n"
            f"default_pool_size = {pool_size}\nmin_pool_size = 0\n"
            f"admin_users = {ADMIN_USER}\nstats_users = {STATS_USER}\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
            f"logfile = {self.dir / 'pgbouncer.log'}\npidfile = {self.dir / 'pgbouncer.pid'}\n"
            "server_check_delay = 0\n"
        )
        if self._user is not None:
            os.chown(self.dir, self._user.pw_uid, self._user.pw_gid)
            for path in self.dir.iterdir():
                os.chown(path, self._user.pw_uid, self._user.pw_gid)
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        as_user = (
            {} if self._user is None else {"user": self._user.pw_uid, "group": self._user.pw_gid}
        )
        self._proc = subprocess.Popen(
            [pgbouncer_binary(), str(self.dir / "pgbouncer.ini")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            **as_user,  # type: ignore[call-overload]
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                with psycopg.connect(
                    self.dsn("pgbouncer", user=ADMIN_USER),
                    autocommit=True,
                    cursor_factory=psycopg.ClientCursor,
                ):
                    return
            except psycopg.OperationalError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"pgbouncer did not start:\n{self.log()}") from None
                time.sleep(0.05)

    def log(self) -> str:
        path = self.dir / "pgbouncer.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def dsn(self, dbname: str, user: str = "app") -> str:
        return make_conninfo("", host="127.0.0.1", port=str(self.port), dbname=dbname, user=user)

    def admin_dsn(self, user: str = STATS_USER) -> str:
        return self.dsn("pgbouncer", user=user)

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)  # immediate shutdown
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)
        self._proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PgBouncer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

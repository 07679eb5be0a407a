"""A throwaway redis-server (Debian's package) on a free loopback port; the
machine's own Redis is never used."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from types import TracebackType

import redis

from tests.support import free_port, wait_until


def redis_binary() -> str:
    path = shutil.which("redis-server")
    if path is None:
        raise AssertionError(
            "redis-server is missing: run scripts/bootstrap, which installs the Debian package"
        )
    return path


class RedisServer:
    def __init__(self, directory: Path, password: str | None = None) -> None:
        self.directory = directory
        self.password = password
        self.port = free_port()
        auth = f":{password}@" if password else ""
        self.url = f"redis://{auth}127.0.0.1:{self.port}/0"
        self.log_path = directory / "redis.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> RedisServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        args = [
            redis_binary(),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.directory),
        ]  # fmt: skip
        if self.password:
            args += ["--requirepass", self.password]
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        wait_until(self._ready, message=f"redis-server answering on port {self.port}")
        return self

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)

    def _ready(self) -> bool:
        assert self._proc is not None
        if self._proc.poll() is not None:
            raise AssertionError(f"redis-server exited:\n{self.log_path.read_text()}")
        try:
            with self.client() as client:
                return bool(client.ping())
        except redis.ConnectionError:
            return False

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

"""A throwaway Prometheus (Debian's ``prometheus`` package) on a free loopback
port, scraping the given targets every second."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Any

import requests
import yaml

from tests.support import free_port, wait_until


def prometheus_binary() -> str:
    path = shutil.which("prometheus")
    if path is None:
        raise AssertionError(
            "prometheus is missing: run scripts/bootstrap, which installs the Debian package"
        )
    return path


class PrometheusServer:
    def __init__(self, directory: Path, targets: list[str], job: str = "lockwatch") -> None:
        self.directory = directory
        self.targets = targets
        self.job = job
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = directory / "prometheus.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PrometheusServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / "prometheus.yml"
        config.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "scrape_configs": [
                        {"job_name": self.job, "static_configs": [{"targets": self.targets}]}
                    ],
                }
            )
        )
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen(
                [
                    prometheus_binary(),
                    f"--config.file={config}",
                    f"--storage.tsdb.path={self.directory / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        wait_until(self._ready, timeout=60, message=f"prometheus ready on {self.url}")
        return self

    def _ready(self) -> bool:
        assert self._proc is not None
        if self._proc.poll() is not None:
            raise AssertionError(f"prometheus exited:\n{self.log_path.read_text()}")
        try:
            return requests.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        except requests.ConnectionError:
            return False

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)

    def api(self, path: str, **params: Any) -> Any:
        """The ``data`` of a successful API answer."""
        response = requests.get(f"{self.url}/api/v1/{path}", params=params, timeout=10)
        body = response.json()
        if body.get("status") != "success":
            raise AssertionError(f"{path} {params}: {body.get('error') or body}")
        return body["data"]

    def query(self, expr: str) -> list[Any]:
        return list(self.api("query", query=expr)["result"])

"""Real Prometheus and Alertmanager for the tests, from the Debian packages
(``prometheus``, ``prometheus-alertmanager``; scripts/bootstrap installs them).

Each runs on a free loopback port with its data in a directory of the test's
own, and fast clocks (1 s scrapes and rule evaluations by default), so an
alert fires within seconds::

    with Prometheus(tmp_path / "prom", scrape={"lockwatch": [lockwatch_address]},
                    rule_files=[RULES], alertmanager=am.address) as prom:
        prom.wait_for_alert("LockwatchLockConvoy")

Under CI=true a missing binary fails the test; elsewhere it skips it, saying
which package to install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
import requests
import yaml

from tests.support import free_port, wait_until

PACKAGES = {
    "prometheus": "prometheus",
    "promtool": "prometheus",
    "prometheus-alertmanager": "prometheus-alertmanager",
    "amtool": "prometheus-alertmanager",
}


def binary(name: str) -> str:
    """The path of a Prometheus tool; fails (under CI) or skips the test without it."""
    found = shutil.which(name) or (
        f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None
    )
    if found:
        return found
    reason = (
        f"{name} is missing: run scripts/bootstrap, which installs the Debian package "
        f"{PACKAGES.get(name, name)}"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


class _Server:
    """A server process with its log in its directory, stopped on exit."""

    name = ""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.address}"
        self.log_path = directory / f"{self.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        wait_until(self._ready, timeout=30, message=f"{self.name} ready on {self.url}")

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.log()}")
        try:
            return requests.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        except requests.ConnectionError:
            return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def get(self, path: str, **params: str) -> Any:
        response = requests.get(f"{self.url}{path}", params=params, timeout=5)
        response.raise_for_status()
        return response.json()

    def __enter__(self) -> _Server:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


class Prometheus(_Server):
    """``scrape``: job name -> ``host:port`` targets; ``rule_files`` are loaded as
    they are; alerts go to ``alertmanager`` (``host:port``) when given."""

    name = "prometheus"

    def __init__(
        self,
        directory: Path,
        *,
        scrape: Mapping[str, Iterable[str]],
        rule_files: Iterable[Path] = (),
        alertmanager: str | None = None,
        interval: str = "1s",
    ) -> None:
        super().__init__(directory)
        config: dict[str, Any] = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": list(targets)}]}
                for job, targets in scrape.items()
            ],
            "rule_files": [str(path) for path in rule_files],
        }
        if alertmanager is not None:
            config["alerting"] = {
                "alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]
            }
        self.config_path = directory / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(config))

    def command(self) -> list[str]:
        return [
            binary("prometheus"),
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.directory / 'data'}",
            f"--web.listen-address={self.address}",
            "--log.level=warn",
        ]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector ``expr`` evaluates to now."""
        data = self.get("/api/v1/query", query=expr)
        return list(data["data"]["result"])

    def alerts(self, state: str | None = None) -> list[dict[str, Any]]:
        found = self.get("/api/v1/alerts")["data"]["alerts"]
        return [a for a in found if state is None or a["state"] == state]

    def wait_for_alert(self, name: str, timeout: float = 60) -> dict[str, Any]:
        def firing() -> dict[str, Any] | None:
            for alert in self.alerts("firing"):
                if alert["labels"].get("alertname") == name:
                    return alert
            return None

        return wait_until(firing, timeout=timeout, message=f"{name} firing in Prometheus")

    def __enter__(self) -> Prometheus:
        self.start()
        return self


class Alertmanager(_Server):
    """Alertmanager with ``config`` (the parsed YAML of alertmanager.yml), clustering off."""

    name = "alertmanager"

    def __init__(self, directory: Path, config: Mapping[str, Any]) -> None:
        super().__init__(directory)
        self.config_path = directory / "alertmanager.yml"
        self.config_path.write_text(yaml.safe_dump(dict(config)))

    def command(self) -> list[str]:
        return [
            binary("prometheus-alertmanager"),
            f"--config.file={self.config_path}",
            f"--storage.path={self.directory / 'data'}",
            f"--web.listen-address={self.address}",
            f"--web.external-url={self.url}/",
            "--cluster.listen-address=",
            "--log.level=warn",
        ]

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.get("/api/v2/alerts"))

    def __enter__(self) -> Alertmanager:
        self.start()
        return self

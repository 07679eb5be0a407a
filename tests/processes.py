"""``lockwatch run`` as a real process, watched from outside through its HTTP API."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.support import wait_until


class LockwatchProcess:
    """One ``python -m lockwatch run`` with its log in a file."""

    def __init__(
        self, config: Path, log: Path, port: int, env: Mapping[str, str] | None = None
    ) -> None:
        self.config = config
        self.log_path = log
        self.base = f"http://127.0.0.1:{port}"
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        # Each start appends to the same log; remember where this run's part begins.
        self.log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "lockwatch", "run", "-c", str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
            )
        try:
            # Generous: a loaded CI machine can take long to start a Python process.
            wait_until(self._answers, timeout=60, message=f"lockwatch answering on {self.base}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; its log:\n{self.log()}") from None

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"lockwatch exited with {self.proc.returncode}:\n{self.log()}")
        try:
            return requests.get(f"{self.base}/healthz", timeout=2).status_code == 200
        except requests.ConnectionError:
            return False

    def log(self, whole: bool = False) -> str:
        if not self.log_path.exists():
            return ""
        text = self.log_path.read_text(errors="replace")
        return text if whole else text[self.log_offset :]

    def findings(self) -> list[dict[str, Any]]:
        response = requests.get(f"{self.base}/api/v1/findings", timeout=5)
        response.raise_for_status()
        return list(response.json()["findings"])

    def finding(self, kind: str, target: str) -> dict[str, Any] | None:
        for finding in self.findings():
            if finding["kind"] == kind and finding["target"] == target:
                return finding
        return None

    def locks(self, target: str) -> list[dict[str, Any]]:
        document = requests.get(f"{self.base}/api/v1/locks", timeout=5).json()
        for entry in document["targets"]:
            if entry["target"] == target:
                return list(entry["locks"])
        return []

    def metric(self, name: str, **labels: str) -> float | None:
        text = requests.get(f"{self.base}/metrics", timeout=5).text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(
                    sample.labels.get(k) == v for k, v in labels.items()
                ):
                    return float(sample.value)
        return None

    def reload(self) -> None:
        """SIGHUP, as ``systemctl reload`` sends it."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGHUP)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode


LOCKS = "{max_hold: 2s, orphan_after: 1h, convoy_waiters: 2, convoy_wait: 1s}"


def write_config(
    tmp_path: Path,
    port: int,
    targets: dict[str, str],
    *,
    locks: str = LOCKS,
    extra: Mapping[str, str] | None = None,
) -> Path:
    """A config polling every 500 ms, each DSN in a file of its own; ``locks``
    is the defaults' lock settings as a YAML flow mapping, ``extra`` more YAML
    for a target (``{"main": "locks: {named: [...]}"}``)."""
    lines = [
        f"listen: 127.0.0.1:{port}",
        f"state_dir: {tmp_path / 'state'}",
        "defaults:",
        "  interval: 500ms",
        "  connect_timeout: 2s",
        "  statement_timeout: 2s",
        f"  locks: {locks}",
        "targets:",
    ]
    for name, dsn in targets.items():
        dsn_file = tmp_path / f"{name}.dsn"
        dsn_file.write_text(dsn + "\n")
        lines += [f"  - name: {name}", f"    dsn_file: {dsn_file}"]
        lines += [f"    {line}" for line in (extra or {}).get(name, "").splitlines()]
    config = tmp_path / "lockwatch.yml"
    config.write_text("\n".join(lines) + "\n")
    return config

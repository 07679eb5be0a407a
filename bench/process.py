"""Child processes the benchmark starts (lockwatch, postgres_exporter): logged
to a file, watched with psutil, and always stopped, whatever happens."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

import psutil
import requests
from prometheus_client.parser import text_string_to_metric_families

STARTUP_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0
LOG_TAIL = 2000  # characters of a child's log shown when it fails


def samples(text: str, name: str, **labels: str) -> list[float]:
    """The values of the samples named ``name`` in an exposition that carry ``labels``."""
    return [
        float(sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    ]


def series_count(text: str) -> int:
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def http_get(url: str, timeout: float = 30.0) -> requests.Response:
    response = requests.get(url, timeout=timeout)
    response.raise_for_status()
    return response


class Process:
    def __init__(
        self, argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None
    ) -> None:
        self.argv = list(argv)
        self.log_path = log_path
        self.env = None if env is None else dict(env)
        self._popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self._popen = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
            )

    @property
    def pid(self) -> int:
        if self._popen is None:
            raise RuntimeError(f"{self.argv[0]} is not started")
        return self._popen.pid

    @property
    def psutil(self) -> psutil.Process:
        return psutil.Process(self.pid)

    def check_alive(self) -> None:
        if self._popen is not None and self._popen.poll() is not None:
            raise RuntimeError(
                f"{Path(self.argv[0]).name} exited with {self._popen.returncode}:\n{self.log_tail()}"
            )

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-LOG_TAIL:]
        except FileNotFoundError:
            return "(no log)"

    def stop(self) -> None:
        popen, self._popen = self._popen, None
        if popen is None or popen.poll() is not None:
            return
        popen.terminate()
        try:
            popen.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait(STOP_TIMEOUT)

    def start_serving(self, url: str, timeout: float = STARTUP_TIMEOUT) -> None:
        """Start, and wait until ``url`` answers 200; stopped again if it never does."""
        self.start()
        try:
            deadline = time.monotonic() + timeout
            while not self._answers(url):
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{url} did not answer within {timeout:g}s:\n{self.log_tail()}"
                    )
                time.sleep(0.05)
        except BaseException:
            self.stop()
            raise

    def _answers(self, url: str) -> bool:
        self.check_alive()
        try:
            return requests.get(url, timeout=5).status_code == 200
        except requests.ConnectionError:
            return False

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

"""The systemd unit passes systemd-analyze, and the daemon behaves as its
``Type=notify`` service: ready, watchdog pings only while polls progress,
reload and stop announced."""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockwatch.config.load import load_settings
from lockwatch.daemon import Daemon
from lockwatch.settings.targets import Settings, Target
from lockwatch.state.target_view import TargetView
from lockwatch.util.sdnotify import Notifier
from tests.fixtures.paths import ROOT
from tests.fixtures.postgres import PgDatabase, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config
from tests.fixtures.systemd import NotifySocket

UNIT = ROOT / "systemd" / "lockwatch.service"
MAX_EXPOSURE = 2.0


def systemd_analyze() -> str:
    path = shutil.which("systemd-analyze")
    if path is None:
        pytest.fail("systemd-analyze is missing: run scripts/bootstrap, which installs systemd")
    return path


def service_settings() -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    section = ""
    for raw in UNIT.read_text().splitlines():
        line = raw.strip()
        if line.startswith("["):
            section = line
        elif line and not line.startswith("#") and section == "[Service]":
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def installable_unit(tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at this venv's lockwatch, which exists
    here (verify checks that the program does); everything else as shipped."""
    program = Path(sys.executable).parent / "lockwatch"
    assert program.exists(), f"{program} is missing: pip install -e . first"
    text = UNIT.read_text()
    assert "ExecStart=/opt/lockwatch/bin/lockwatch " in text
    unit = tmp_path / "lockwatch.service"
    unit.write_text(
        text.replace("ExecStart=/opt/lockwatch/bin/lockwatch ", f"ExecStart={program} ")
    )
    return unit


def test_the_unit_is_a_notify_service_with_watchdog_reload_credentials_and_a_dynamic_user() -> None:
    service = service_settings()

    assert service["Type"] == ["notify"]
    assert service["NotifyAccess"] == ["main"]
    assert service["WatchdogSec"] == ["60s"]
    assert service["Restart"] == ["on-failure"]
    assert service["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert service["DynamicUser"] == ["yes"]
    assert service["ConfigurationDirectory"] == ["lockwatch"]
    assert service["StateDirectory"] == ["lockwatch"]
    assert service["LoadCredential"] == ["orders-dsn:/etc/lockwatch/orders-dsn"]
    assert service["CapabilityBoundingSet"] == [""]
    (start,) = service["ExecStart"]
    assert "run -c ${CONFIGURATION_DIRECTORY}/lockwatch.yml" in start
    assert "--state-dir ${STATE_DIRECTORY}" in start


def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    result = subprocess.run(
        [systemd_analyze(), "verify", str(installable_unit(tmp_path))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr


def test_systemd_analyze_security_rates_the_unit_2_0_or_lower(tmp_path: Path) -> None:
    result = subprocess.run(
        [systemd_analyze(), "security", "--offline=true", str(installable_unit(tmp_path))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    match = re.search(r"Overall exposure level for lockwatch\.service: ([\d.]+)", result.stdout)
    assert match is not None, result.stdout
    print(f"systemd-analyze security: exposure {match.group(1)}")
    assert float(match.group(1)) <= MAX_EXPOSURE, result.stdout


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[NotifySocket]:
    listener = NotifySocket(str(tmp_path / "notify"))
    yield listener
    listener.close()


@pytest.mark.slow
@pytest.mark.parametrize("pg_server", ["pg18"], indirect=True)
def test_the_daemon_is_ready_pings_the_watchdog_and_announces_reload_and_stop(
    tmp_path: Path, pg: PgDatabase, notify_socket: NotifySocket
) -> None:
    port = free_port()
    config = write_config(tmp_path, port, {"main": pg.monitor_dsn})
    # A 1 s watchdog, as WatchdogSec=1s would set it: pings every half second.
    env = {"NOTIFY_SOCKET": notify_socket.address, "WATCHDOG_USEC": "1000000"}
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port, env)
    lockwatch.start()
    try:
        ready = notify_socket.wait_for("READY=1")
        assert "STATUS=watching 1 target(s)" in ready
        notify_socket.wait_for("WATCHDOG=1")
        notify_socket.wait_for("WATCHDOG=1")

        lockwatch.reload()
        reloading = notify_socket.wait_for("RELOADING=1")
        assert any(line.startswith("MONOTONIC_USEC=") for line in reloading)
        notify_socket.wait_for("READY=1")
    finally:
        assert lockwatch.stop() == 0, lockwatch.log()
    notify_socket.wait_for("STOPPING=1")
    assert "lockwatch stopped" in lockwatch.log()


def test_the_watchdog_is_pinged_only_while_polls_make_progress(
    notify_socket: NotifySocket, caplog: pytest.LogCaptureFixture
) -> None:
    target = Target("main", "postgresql://nobody@127.0.0.1:9/none")
    notifier = Notifier({"NOTIFY_SOCKET": notify_socket.address, "WATCHDOG_USEC": "2000000"})
    daemon = Daemon(Settings((target,), listen="127.0.0.1:0"), notifier=notifier)
    daemon.http.start()
    try:
        daemon.board.publish(TargetView(target))
        daemon.keep_alive(time.monotonic())
        assert notify_socket.receive() == ["WATCHDOG=1"]

        # The last poll is now older than the loop may take: the loop is wedged.
        daemon.http.stale_after = 0.0
        with caplog.at_level(logging.ERROR, logger="lockwatch.daemon"):
            daemon.keep_alive(time.monotonic() + 5)
        assert not notify_socket.pending()
        assert "not pinging the systemd watchdog: poll loop stalled" in caplog.text

        daemon.http.stale_after = 60.0
        daemon.board.publish(TargetView(target))
        daemon.keep_alive(time.monotonic() + 10)
        assert wait_until(notify_socket.pending, message="pings resume")
        assert notify_socket.receive() == ["WATCHDOG=1"]
    finally:
        daemon.http.stop()
        notifier.close()


def test_the_readme_service_config_loads_its_dsn_from_the_credentials_directory(
    tmp_path: Path,
) -> None:
    section = (ROOT / "README.md").read_text().split("## Installing as a service", 1)[1]
    config = section.split("<<'YAML'\n", 1)[1].split("YAML\n", 1)[0]
    (tmp_path / "lockwatch.yml").write_text(config)
    (tmp_path / "orders-dsn").write_text("postgresql://lockwatch:pw@db:5432/orders\n")
    credential = service_settings()["LoadCredential"][0].split(":", 1)[0]

    settings = load_settings(tmp_path / "lockwatch.yml", {"CREDENTIALS_DIRECTORY": str(tmp_path)})

    (target,) = settings.targets
    assert target.dsn == "postgresql://lockwatch:pw@db:5432/orders"
    assert f"${{CREDENTIALS_DIRECTORY}}/{credential}" in config

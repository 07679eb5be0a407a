"""The sd_notify protocol against a real datagram socket, as systemd listens on one."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockwatch.util.sdnotify import Notifier
from tests.fixtures.systemd import NotifySocket


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[NotifySocket]:
    server = NotifySocket(str(tmp_path / "notify"))
    yield server
    server.close()


def test_ready_reaches_the_socket_with_a_status_line(listener: NotifySocket) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": listener.address})

    assert notifier.ready("watching 2 targets")

    assert listener.receive() == ["READY=1", "STATUS=watching 2 targets"]
    notifier.close()


def test_reloading_stopping_and_watchdog_each_send_their_message(listener: NotifySocket) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": listener.address})

    notifier.reloading()
    reloading = listener.receive()
    notifier.watchdog()
    watchdog = listener.receive()
    notifier.stopping()
    stopping = listener.receive()

    assert reloading[0] == "RELOADING=1"
    assert reloading[1].startswith("MONOTONIC_USEC=") and int(reloading[1].split("=")[1]) > 0
    assert watchdog == ["WATCHDOG=1"]
    assert stopping == ["STOPPING=1"]
    notifier.close()


def test_an_abstract_socket_address_is_reached_through_its_leading_nul() -> None:
    server = NotifySocket(f"@lockwatch-test-{uuid.uuid4().hex}")
    notifier = Notifier({"NOTIFY_SOCKET": server.address})
    try:
        assert notifier.notify("READY=1")
        assert server.receive() == ["READY=1"]
    finally:
        notifier.close()
        server.close()


def test_without_notify_socket_nothing_is_sent_and_nothing_fails() -> None:
    notifier = Notifier({})

    assert not notifier.enabled
    assert not notifier.ready("ignored")
    assert notifier.watchdog_interval is None


def test_a_vanished_socket_is_logged_once_and_does_not_raise(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": str(tmp_path / "gone")})

    with caplog.at_level(logging.WARNING, logger="lockwatch.util.sdnotify"):
        results = [notifier.watchdog() for _ in range(3)]

    assert results == [False, False, False]
    assert len([r for r in caplog.records if "cannot notify systemd" in r.message]) == 1
    notifier.close()


def test_the_watchdog_pings_at_half_the_interval_systemd_allows() -> None:
    env = {"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())}

    assert Notifier(env).watchdog_interval == 15.0


def test_a_watchdog_meant_for_another_process_is_not_served() -> None:
    env = {"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}

    assert Notifier(env).watchdog_interval is None


def test_a_notify_socket_that_is_not_a_unix_socket_disables_notification() -> None:
    notifier = Notifier({"NOTIFY_SOCKET": "vsock:2:1234"})

    assert not notifier.enabled
    assert not notifier.ready("x")

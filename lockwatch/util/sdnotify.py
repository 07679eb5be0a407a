"""systemd's notification protocol (sd_notify), without libsystemd.

Under ``Type=notify`` systemd passes the address of a datagram socket in
``NOTIFY_SOCKET`` and waits for ``READY=1``; with ``WatchdogSec=`` it also
passes ``WATCHDOG_USEC`` and restarts the service when ``WATCHDOG=1`` stops
coming. Outside systemd there is no socket and every call does nothing, so the
daemon calls these unconditionally.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping

log = logging.getLogger(__name__)


def _address(value: str) -> str | None:
    """The socket address from ``NOTIFY_SOCKET``: a path, or ``@name`` for the
    abstract namespace (spelt with a leading NUL byte in the socket API).

    >>> _address("/run/systemd/notify"), _address("@lockwatch/notify")
    ('/run/systemd/notify', '\\x00lockwatch/notify')
    >>> _address("vsock:2:1234") is None
    True
    """
    if value.startswith("/"):
        return value
    if value.startswith("@") and len(value) > 1:
        return "\0" + value[1:]
    return None


class Notifier:
    """Sends state changes to the service manager, if there is one.

    A message that cannot be sent is logged once and otherwise ignored:
    monitoring must not stop because the service manager went away.
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        raw = env.get("NOTIFY_SOCKET", "")
        self._address = _address(raw) if raw else None
        if raw and self._address is None:
            log.warning("NOTIFY_SOCKET=%s is not a Unix socket; not notifying systemd", raw)
        self.watchdog_interval = self._watchdog_interval(env)
        self._socket: socket.socket | None = None
        self._failed = False

    @staticmethod
    def _watchdog_interval(env: Mapping[str, str]) -> float | None:
        """Seconds between pings: half of what systemd allows, as sd_watchdog_enabled advises."""
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        if not usec.isdigit() or int(usec) == 0:
            return None
        # The variables are inherited by children; the pings are wanted from the main process.
        if pid and (not pid.isdigit() or int(pid) != os.getpid()):
            return None
        return int(usec) / 2_000_000

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def notify(self, *assignments: str) -> bool:
        """Send ``KEY=value`` lines in one datagram; True if it was sent."""
        if self._address is None:
            return False
        message = "\n".join(assignments).encode("utf-8", "backslashreplace")
        try:
            if self._socket is None:
                self._socket = socket.socket(
                    socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC
                )
            self._socket.sendto(message, self._address)
        except OSError as exc:
            if not self._failed:
                log.warning("cannot notify systemd at %s: %s", self._address, exc)
                self._failed = True
            return False
        self._failed = False
        return True

    def ready(self, status: str) -> bool:
        return self.notify("READY=1", f"STATUS={status}")

    def reloading(self) -> bool:
        # MONOTONIC_USEC lets Type=notify-reload match this message to its SIGHUP.
        return self.notify("RELOADING=1", f"MONOTONIC_USEC={time.monotonic_ns() // 1000}")

    def stopping(self) -> bool:
        return self.notify("STOPPING=1")

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def status(self, text: str) -> bool:
        return self.notify(f"STATUS={text}")

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None

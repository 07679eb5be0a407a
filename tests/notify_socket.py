"""A datagram socket bound where ``NOTIFY_SOCKET`` points, as systemd listens on one."""

from __future__ import annotations

import socket
import time


class NotifySocket:
    def __init__(self, address: str) -> None:
        self.address = address
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + address[1:] if address.startswith("@") else address)
        self.sock.settimeout(5)
        self.seen: list[list[str]] = []

    def receive(self) -> list[str]:
        """The next message, as its lines; fails after 5 s without one."""
        message = self.sock.recv(4096).decode().split("\n")
        self.seen.append(message)
        return message

    def wait_for(self, line: str, timeout: float = 20) -> list[str]:
        """Read messages until one has ``line``; return that message."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                message = self.receive()
            except TimeoutError:
                continue
            if line in message:
                return message
        raise AssertionError(f"no {line} within {timeout:g}s; got {self.seen}")

    def pending(self) -> bool:
        """Whether a message is waiting, without waiting for one."""
        self.sock.setblocking(False)
        try:
            self.sock.recv(4096, socket.MSG_PEEK)
        except BlockingIOError:
            return False
        finally:
            self.sock.settimeout(5)
        return True

    def close(self) -> None:
        self.sock.close()

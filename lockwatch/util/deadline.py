"""A total deadline for an outbound HTTP call made with requests.

requests' ``timeout`` bounds each read, not the call: a receiver that trickles
its answer a byte a second keeps every read short and the call going for
minutes. Inside :func:`within`, a watchdog thread shuts the call's socket down
once the deadline passes, which ends the blocked read at once. What the call then returns or raises is not
the receiver's answer (http.client takes a head cut short for a whole one):
after the block, ``Deadline.expired`` says to discard it. Only a session
from :func:`deadline_session` lets the watchdog find the socket: its pools
hand each connection they give out to the calling thread's deadline.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

# How often the watchdog looks again for a socket still being connected when
# the deadline passed (connecting is bounded by the connect timeout).
_RECHECK = 0.05

_current = threading.local()


class Deadline:
    """One call's deadline, armed by :func:`within`."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._connection: Any = None
        self._done = threading.Event()

    def watch(self, connection: Any) -> None:
        self._connection = connection

    def _run(self) -> None:
        if self._done.wait(self.seconds):
            return
        self.expired = True
        while not self._done.is_set():
            sock = getattr(self._connection, "sock", None)
            if sock is not None:
                _shut_down(sock)
                return
            self._done.wait(_RECHECK)

    def _finish(self) -> None:
        self._done.set()


def _shut_down(sock: socket.socket) -> None:
    """Wake the reader blocked on ``sock`` from another thread: shutting a
    duplicate of its descriptor down leaves closing it to its owner."""
    try:
        fd = os.dup(sock.fileno())
    except OSError:
        return  # already closed
    with socket.socket(fileno=fd) as duplicate, contextlib.suppress(OSError):
        duplicate.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def within(seconds: float) -> Iterator[Deadline]:
    """The calls made in this thread inside the block, through a
    :func:`deadline_session`, end at most ``seconds`` after it began."""
    deadline = Deadline(seconds)
    outer = getattr(_current, "deadline", None)
    _current.deadline = deadline
    watchdog = threading.Thread(target=deadline._run, name="http-deadline", daemon=True)
    watchdog.start()
    try:
        yield deadline
    finally:
        deadline._finish()
        _current.deadline = outer
        watchdog.join()


def _watched(connection: Any) -> Any:
    deadline: Deadline | None = getattr(_current, "deadline", None)
    if deadline is not None:
        deadline.watch(connection)
    return connection


class _HTTPPool(HTTPConnectionPool):
    def _get_conn(self, timeout: float | None = None) -> Any:
        return _watched(super()._get_conn(timeout))


class _HTTPSPool(HTTPSConnectionPool):
    def _get_conn(self, timeout: float | None = None) -> Any:
        return _watched(super()._get_conn(timeout))


_POOLS = {"http": _HTTPPool, "https": _HTTPSPool}


class _DeadlineAdapter(HTTPAdapter):
    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _POOLS

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        # A SOCKS proxy has pools of its own kind (its calls keep per-read timeouts).
        if not proxy.lower().startswith("socks"):
            manager.pool_classes_by_scheme = _POOLS
        return manager


def deadline_session() -> requests.Session:
    """A session whose calls :func:`within` can bound."""
    session = requests.Session()
    adapter = _DeadlineAdapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session

"""A total deadline for an outbound HTTP call made with requests.

requests' ``timeout`` bounds each read, not the call: a receiver that trickles
its answer a byte a second keeps every read short and the call going for
minutes. Inside :func:`within`, a watchdog thread shuts the call's socket down
once the deadline passes, which ends the blocked read at once. What the call then returns or raises is not
the receiver's answer (http.client takes a head cut short for a whole one):
after the block, ``Deadline.expired`` says to discard it. Only a session
from :func:`lockwatch.util.http_session.deadline_session` lets the watchdog
find the socket: its pools hand each connection they give out to the calling
thread's deadline (:func:`watched`). This module imports no HTTP library: a
process that makes no HTTP call never loads requests.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator
from typing import Any

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
    ``deadline_session()``, end at most ``seconds`` after it began."""
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


def watched(connection: Any) -> Any:
    """``connection``, given to the calling thread's deadline if it has one."""
    deadline: Deadline | None = getattr(_current, "deadline", None)
    if deadline is not None:
        deadline.watch(connection)
    return connection

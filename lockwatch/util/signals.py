"""What a signal handler asks of a main loop, told without taking a lock.

Python runs a signal handler in the main thread between two bytecodes, which
may be while that thread holds a lock: inside ``threading.Event.wait`` or
``clear``, the lock of the Event's condition. A handler calling
``Event.set()`` there waits for its own thread forever (Python's signal
documentation warns of it): lockwatch, sent SIGTERM just after a SIGHUP, once
stopped answering signals until it was killed. ``queue.SimpleQueue.put`` is
reentrant (its documentation says so), so the handlers put requests on one
and the main loop waits on it.
"""

from __future__ import annotations

import queue

__all__ = ["Requests"]


class Requests:
    """Requests (``"stop"``, ``"reload"``, ...) put by signal handlers or other
    threads, taken by one main loop.

    >>> requests = Requests()
    >>> requests.put("reload"); requests.put("reload"); requests.put("stop")
    >>> sorted(requests.wait(0))
    ['reload', 'stop']
    >>> requests.wait(0.01)
    set()
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[str] = queue.SimpleQueue()

    def put(self, request: str) -> None:
        """Safe in a signal handler: takes no lock another frame of the thread may hold."""
        self._queue.put(request)

    def wait(self, timeout: float | None) -> set[str]:
        """Every request made since the last call, after waiting up to
        ``timeout`` seconds (None: until one comes) for the first; the same
        request made twice meanwhile counts once."""
        try:
            taken = {self._queue.get(timeout=timeout)}
        except queue.Empty:
            return set()
        while True:
            try:
                taken.add(self._queue.get_nowait())
            except queue.Empty:
                return taken

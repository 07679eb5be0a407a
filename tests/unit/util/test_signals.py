"""A request put by a signal handler wakes the main thread waiting for one."""

from __future__ import annotations

import os
import signal
import threading

from lockwatch.util.signals import Requests


def test_a_request_from_a_signal_handler_wakes_the_main_thread_waiting_for_it() -> None:
    assert threading.current_thread() is threading.main_thread()  # where handlers run
    requests = Requests()
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: requests.put("stop"))
    sender = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGUSR1))
    try:
        sender.start()
        assert requests.wait(30) == {"stop"}
    finally:
        sender.join()
        signal.signal(signal.SIGUSR1, previous)
    assert requests.wait(0) == set()

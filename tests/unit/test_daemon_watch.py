"""The daemon's main loop wakes up once a second at most, or as a poll step
in progress reaches its limit, so a hung step is broken on time without the
process waking up many times a second beside the database; and it hears
SIGHUP and SIGTERM however close together they come."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from lockwatch.daemon import PAST_LIMIT, WATCHDOG_TICK, Daemon
from lockwatch.settings.targets import Settings, Target
from tests.fixtures.postgres import wait_until

UNREACHABLE = "postgresql://nobody@127.0.0.1:9/none"


def test_the_main_loop_looks_again_as_a_step_in_progress_reaches_its_limit() -> None:
    target = Target("main", UNREACHABLE, statement_timeout=2.0)
    daemon = Daemon(Settings((target,), listen="127.0.0.1:0"))
    session = daemon.runners[0].session
    limit = session.step_limit
    assert limit > WATCHDOG_TICK

    assert daemon._next_look(100.0) == WATCHDOG_TICK  # no step: none can hang sooner
    session.busy_since = 100.0 - limit + 0.5  # half a second before its limit
    assert daemon._next_look(100.0) == pytest.approx(0.5 + PAST_LIMIT)
    session.busy_since = 100.0 - limit - 3.0  # past it (the watchdog breaks it now)
    assert daemon._next_look(100.0) == PAST_LIMIT
    session.busy_since = 100.0 - limit
    assert session.overdue(100.0 + PAST_LIMIT)  # what the loop finds when it looks


def test_a_sighup_and_a_sigterm_right_after_it_are_each_heard() -> None:
    """The handlers only put a request (util/signals.py): one that set an
    Event could wait forever for the loop's own hold of that Event's lock."""
    settings = Settings((Target("main", UNREACHABLE),), listen="127.0.0.1:0")
    reloads: list[Settings] = []

    def reload() -> Settings:
        reloads.append(settings)
        return settings

    daemon = Daemon(settings, reload=reload)

    def handlers() -> tuple[object, object]:
        return signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)

    default = handlers()

    def send() -> None:
        # Once run_forever's handlers are both in place (SIGHUP's default ends
        # the process): neither is the one it had before.
        wait_until(
            lambda: all(now is not was for now, was in zip(handlers(), default, strict=True)),
            30,
            0.01,
            "the daemon's handlers",
        )
        os.kill(os.getpid(), signal.SIGHUP)
        wait_until(lambda: reloads, 30, 0.01, "the first reload")
        os.kill(os.getpid(), signal.SIGHUP)
        os.kill(os.getpid(), signal.SIGTERM)

    sender = threading.Thread(target=send)
    sender.start()
    daemon.run_forever()  # returns on SIGTERM: a loop deaf to it hangs to the test's timeout
    sender.join()
    assert daemon.stop_event.is_set()
    assert handlers() == default
    assert len(reloads) in (1, 2)  # the second may come after the stop was heard


def test_a_loop_in_another_thread_ends_as_soon_as_the_daemon_stops() -> None:
    daemon = Daemon(Settings((Target("main", UNREACHABLE),), listen="127.0.0.1:0"))
    daemon.start()
    loop = threading.Thread(target=daemon.watch)
    loop.start()
    daemon.stop()  # the demo's way: its main loop runs in a thread of its own
    loop.join(timeout=30)
    assert not loop.is_alive()

"""One living message per incident, end to end (issue 30 items 1 and 2): two
``lockwatch run --replica`` share a store and send to a Telegram stand-in
(``living: true``) and a Slack Web API stand-in, both keeping messages by id.

A real convoy on a real server opens an incident and grows; the sender is
killed (-9) and the other replica takes over; the holder lets go (resolved),
takes the lock again twice within the reopen grace (flapping), with a restart
of both replicas while it is open, and lets go for good. Each chat holds one
message for all of it, edited in place, with a thread reply each time it came
back or resolved; the final text says how it ended and how often it opened.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.fixtures.postgres import PgDatabase, queue_on_lock, wait_until
from tests.fixtures.processes import LockwatchProcess
from tests.fixtures.standins import ChatStandin, Kept, add_living
from tests.integration.test_ha_sender import Replicas, store

__all__ = ["store"]  # the shared store's fixture, used here

pytestmark = [
    pytest.mark.pg,
    pytest.mark.slow,
    pytest.mark.parametrize("pg_server", ["pg18"], indirect=True),
]

KEY = 4343
SERVICES = ("telegram", "slack_api")


def _living(config: Path, standin: ChatStandin, notify: str) -> None:
    add_living(config, standin, notify=f"{notify}\nedit_interval: 1s")


@pytest.fixture
def replicas(
    tmp_path: Path, pg: PgDatabase, store: PgDatabase, standin: ChatStandin
) -> Iterator[Replicas]:
    made = Replicas(tmp_path, pg, store, standin, channels=_living)
    yield made
    made.stop()
    for process in made.processes.values():
        whole = process.log(whole=True)
        assert standin.token not in whole and standin.slack_token not in whole


def _one(standin: ChatStandin, service: str) -> Kept | None:
    kept = list(standin.kept(service).values())
    assert len(kept) <= 1, f"{service} holds {len(kept)} messages: {[k.text[:60] for k in kept]}"
    return kept[0] if kept else None


def _each(standin: ChatStandin, test: Any, message: str) -> None:
    """Wait until the one message of each chat passes ``test``."""

    def passes() -> bool:
        return all((kept := _one(standin, s)) is not None and test(kept) for s in SERVICES)

    try:
        wait_until(passes, timeout=30, message=message)
    except AssertionError as exc:
        shown = {
            s: [(k.text.splitlines()[:3], k.replies) for k in standin.kept(s).values()]
            for s in SERVICES
        }
        raise AssertionError(f"{exc}; the chats hold {shown}") from None


def _replies(kept: Kept, mark: str) -> int:
    return sum(1 for reply in kept.replies if reply.lstrip("*").startswith(mark))


def _head(kept: Kept) -> str:
    return kept.text.splitlines()[0].lstrip("*")


def test_one_message_per_incident_through_growth_fail_over_flapping_and_a_restart(
    replicas: Replicas, pg: PgDatabase, standin: ChatStandin
) -> None:
    replicas.start()
    holder = pg.connect("nightly-job")
    holder.execute("SELECT pg_advisory_lock(%s)", (KEY,))
    waiters = [queue_on_lock(pg.connect(f"worker-{n}"), KEY) for n in range(2)]
    _each(standin, lambda k: "2 waiting" in k.text, "the convoy's message, 2 waiting")

    # It grows: a third waiter is edited in, no new message, no reply for it.
    waiters.append(queue_on_lock(pg.connect("worker-3"), KEY))
    _each(standin, lambda k: "3 waiting" in k.text and k.edits >= 1, "edited to 3 waiting")

    # Fail-over mid-incident: the survivor edits the same message.
    killed = replicas.sender()
    died_at = replicas.kill(killed)
    replicas.survivor_takes_over(killed, died_at)
    # The killed one restarts: it must see the flapping too, to tell it when it sends again.
    restarted = replicas.processes[killed]
    restarted.start()
    wait_until(
        lambda: (restarted.metric("lockwatch_polls_total", target="main") or 0) >= 2,
        message="the restarted replica polls",
    )
    holder.execute("SELECT pg_advisory_unlock(%s)", (KEY,))
    for waiter in waiters:
        waiter.join()
    _each(standin, lambda k: _replies(k, "✅") == 1, "resolved, with a reply")
    _both_saw_it_end(replicas)
    for service in SERVICES:
        kept = _one(standin, service)
        assert kept is not None and _head(kept).startswith("✅ RESOLVED: "), kept

    # Flap 1: the same session takes the lock again within the grace.
    holder.execute("SELECT pg_advisory_lock(%s)", (KEY,))
    _each(standin, lambda k: _replies(k, "🔁") == 1, "reopened, with a reply")
    for service in SERVICES:
        kept = _one(standin, service)
        assert kept is not None
        assert _head(kept).startswith("🔥 OPEN: ") and "opened 2 times in " in kept.text
    _both_saw_it_back(replicas, reopened=1)

    # A restart of both replicas while it is open: still the same message.
    replicas.stop()
    replicas.start()
    replicas.sender()
    _both_saw_it_back(replicas, reopened=1)
    holder.execute("SELECT pg_advisory_unlock(%s)", (KEY,))
    _each(standin, lambda k: _replies(k, "✅") == 2, "resolved again after the restart")
    _both_saw_it_end(replicas)

    # Flap 2, then the end.
    holder.execute("SELECT pg_advisory_lock(%s)", (KEY,))
    _each(standin, lambda k: "opened 3 times in " in k.text, "reopened a second time")
    _both_saw_it_back(replicas, reopened=2)
    holder.execute("SELECT pg_advisory_unlock(%s)", (KEY,))
    _each(standin, lambda k: _replies(k, "✅") == 3, "resolved for good")

    for service in SERVICES:
        kept = _one(standin, service)
        assert kept is not None
        print(f"{service}: 1 message, {kept.edits} edits, replies {kept.replies}")
        assert _head(kept).startswith("✅ RESOLVED: ")
        assert "opened 3 times in " in kept.text and "resolved (released) after" in kept.text
        assert _replies(kept, "🔁") == 2
        assert len(kept.replies) == _replies(kept, "🔁") + 3 + _replies(kept, "⬆️")
    # Every sendMessage but the first replied in that message's thread.
    posts = [r for r in standin.delivered("telegram") if r.path.endswith("/sendMessage")]
    assert sum(1 for r in posts if "reply_parameters" not in r.body) == 1

    # Each replica's timeline and log say it opened three times: both kept the
    # whole story through the restart of both, the sender and the other one.
    for name, process in replicas.alive():
        try:
            flapped = wait_until(
                lambda: _reopened_twice(process),  # noqa: B023 (called at once)
                message=f"replica {name} keeps it, reopened twice",
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}; it keeps {_stories(process)}") from None
        assert f"incident {flapped['id']} reopened [" in process.log(whole=True)
        events = [e["detail"] for e in flapped["timeline"] if e["event"] == "reopened"]
        assert len(events) == 2 and "opened 3 times in " in events[-1], events


def _reopened_twice(process: LockwatchProcess) -> dict[str, Any] | None:
    return next((i for i in _incidents(process.base) if len(i["reopened"]) == 2), None)


def _stories(process: LockwatchProcess) -> list[tuple[str, int]]:
    """Each incident the replica keeps, with how often it reopened."""
    return [(i["id"], len(i["reopened"])) for i in _incidents(process.base)]


def _incidents(base: str, state: str = "resolved") -> list[dict[str, Any]]:
    answer = requests.get(f"{base}/api/v1/incidents", params={"state": state}, timeout=5)
    answer.raise_for_status()
    return list(answer.json()["incidents"])


def _both_saw_it_end(replicas: Replicas) -> None:
    """Each replica's own book resolved it too (each tells of it when it sends),
    before the root comes back."""
    for name, process in replicas.alive():
        base = process.base
        wait_until(lambda: not _incidents(base, "open"), message=f"{name} sees it resolved")  # noqa: B023 (called at once)


def _both_saw_it_back(replicas: Replicas, reopened: int) -> None:
    """Each replica's own book has it open again, reopened this often, before
    the root goes: a flap that a replica never polled during (the sender told
    it and both were stopped, or the root went before a restarted replica's
    first poll) is one its book cannot count."""
    for name, process in replicas.alive():
        base = process.base
        wait_until(
            lambda: any(len(i["reopened"]) == reopened for i in _incidents(base, "open")),  # noqa: B023 (called at once)
            message=f"{name} sees it back, reopened {reopened} time(s)",
        )

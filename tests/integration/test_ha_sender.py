"""Two replicas of one shard, one sender (issue 16): both ``lockwatch run``
watch the same target with the same config but for ``--replica``; they elect
the sender through a lease in the shared store (another database of the test
cluster). The sender is killed (-9) mid-incident: the other takes over and
the Telegram stand-in gets each message once."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest

from tests.fixtures.postgres import PgDatabase, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config
from tests.fixtures.standins import ChatStandin, Received, add_telegram, telegram_flood

pytestmark = [
    pytest.mark.pg,
    pytest.mark.slow,
    # The election does not depend on the watched server's version: one is enough.
    pytest.mark.parametrize("pg_server", ["pg18"], indirect=True),
]

LEASE = 3.0  # seconds; renewed every second
# Takeover after a kill: the dead sender's lease runs out (at most LEASE after
# its last renewal), the survivor's next try (LEASE/3), its next notify tick (1 s).
TAKEOVER_BOUND = LEASE + LEASE / 3 + 1.0
NOTIFY = f"lease: {LEASE:g}s\ndeadline: 1s"  # a send's deadline + 1 s margin fits in 2/3 of it
KEY = 4242


@pytest.fixture
def store(pg: PgDatabase) -> Iterator[PgDatabase]:
    """The shared store: a database of its own beside the watched one."""
    with closing(PgDatabase(pg.server)) as database:
        yield database


class Replicas:
    """Two ``lockwatch run --replica`` with one config (but their ports and state dirs)."""

    def __init__(
        self,
        tmp_path: Path,
        pg: PgDatabase,
        store: PgDatabase,
        standin: ChatStandin,
        channels: Callable[..., None] = add_telegram,  # add_telegram(config, standin, notify=...)
    ):
        store_dsn = tmp_path / "store.dsn"
        store_dsn.write_text(store.admin_dsn + "\n")
        self.processes: dict[str, LockwatchProcess] = {}
        for name in ("a", "b"):
            home = tmp_path / name
            home.mkdir()
            port = free_port()
            config = write_config(home, port, {"main": pg.monitor_dsn})
            with config.open("a") as extra:
                extra.write(f"pings:\n  store: postgres\n  dsn_file: {store_dsn}\n")
            channels(config, standin, notify=NOTIFY)
            log = home / "lockwatch.log"
            self.processes[name] = LockwatchProcess(config, log, port, args=("--replica", name))

    def start(self) -> None:
        for process in self.processes.values():
            process.start()

    def sender(self) -> str:
        """The replica that says it is the sender, once exactly one does."""

        def one() -> str | None:
            senders = [name for name, p in self.alive() if _is_sender(p, name)]
            return senders[0] if len(senders) == 1 else None

        return wait_until(one, timeout=20, message="exactly one replica is the sender")

    def alive(self) -> list[tuple[str, LockwatchProcess]]:
        return [(n, p) for n, p in self.processes.items() if p.proc and p.proc.poll() is None]

    def kill(self, name: str) -> float:
        """kill -9 ``name``; the moment it died (monotonic)."""
        self.processes[name].kill()
        return time.monotonic()

    def survivor_takes_over(self, killed: str, died_at: float, how: str = "kill -9") -> float:
        """Seconds from the kill (or stop) until the other replica says it is the sender."""
        other = next(n for n in self.processes if n != killed)
        process = self.processes[other]
        wait_until(lambda: _is_sender(process, other), timeout=30, message=f"{other} takes over")
        took = time.monotonic() - died_at
        print(
            f"takeover by replica {other}: {took:.2f}s after the {how} (bound {TAKEOVER_BOUND:g}s)"
        )
        assert process.metric("lockwatch_notify_sender_changes_total", replica=other) == 1
        assert "is the sender for all now" in process.log()
        return took

    def stop(self) -> None:
        for process in self.processes.values():
            if process.proc is not None:
                assert process.stop() in (0, -signal.SIGKILL), process.log(whole=True)


def _is_sender(process: LockwatchProcess, name: str) -> bool:
    return process.metric("lockwatch_notify_sender", replica=name) == 1


@pytest.fixture
def replicas(
    tmp_path: Path, pg: PgDatabase, store: PgDatabase, standin: ChatStandin
) -> Iterator[Replicas]:
    made = Replicas(tmp_path, pg, store, standin)
    yield made
    made.stop()
    for process in made.processes.values():
        assert standin.token not in process.log(whole=True)


def _incident_line(text: str) -> str:
    """The line naming the incident: ``critical · main · incident <id>``."""
    return next(line for line in text.splitlines() if " · incident " in line)


def _opened_and_resolved(standin: ChatStandin) -> tuple[Received, Received]:
    wait_until(lambda: len(standin.delivered("telegram")) >= 2, timeout=30, message="resolved")
    delivered = standin.delivered("telegram")
    texts = [r.text.splitlines()[0] for r in delivered]
    assert len(delivered) == 2, f"expected one opened and one resolved message, got {texts}"
    opened, resolved = delivered
    assert opened.text.startswith("🔥 OPENED: "), texts
    assert resolved.text.startswith("✅ RESOLVED: "), texts
    assert _incident_line(opened.text) == _incident_line(resolved.text)
    return opened, resolved


def test_the_sender_killed_mid_incident_is_replaced_and_each_message_arrives_once(
    replicas: Replicas, pg: PgDatabase, standin: ChatStandin
) -> None:
    replicas.start()
    holder = pg.connect("nightly-job")
    holder.execute("SELECT pg_advisory_lock(%s)", (KEY,))
    wait_until(lambda: standin.delivered("telegram"), timeout=30, message="the opened message")
    killed = replicas.sender()

    died_at = replicas.kill(killed)
    holder.execute("SELECT pg_advisory_unlock(%s)", (KEY,))
    replicas.survivor_takes_over(killed, died_at)
    _opened_and_resolved(standin)
    # The survivor announced nothing of its own: no second "opened" after a while either.
    survivor = next(p for n, p in replicas.processes.items() if n != killed)
    survivor.wait_polls(4)
    assert len(standin.delivered("telegram")) == 2


def test_a_message_refused_in_the_killed_senders_outbox_is_delivered_once_by_the_survivor(
    replicas: Replicas, pg: PgDatabase, standin: ChatStandin
) -> None:
    # The first attempt is refused with a long retry_after: the message waits
    # in the sender's (shared) outbox when the sender dies.
    standin.reply(telegram_flood(retry_after=120), service="telegram")
    replicas.start()
    holder = pg.connect("nightly-job")
    holder.execute("SELECT pg_advisory_lock(%s)", (KEY,))
    wait_until(lambda: standin.requests("telegram"), timeout=30, message="a refused attempt")
    killed = replicas.sender()
    assert replicas.processes[killed].metric("lockwatch_notifications_pending", channel="ops") == 1

    died_at = replicas.kill(killed)
    replicas.survivor_takes_over(killed, died_at)
    (delivered,) = wait_until(
        lambda: standin.delivered("telegram"), timeout=30, message="the survivor delivers"
    )
    print(
        f"the pending message delivered by the survivor {delivered.at - died_at:.2f}s after the kill"
    )
    holder.execute("SELECT pg_advisory_unlock(%s)", (KEY,))
    _opened_and_resolved(standin)
    refused = [r for r in standin.requests("telegram") if r.status == 429]
    assert len(refused) == 1


def test_a_sender_stopped_with_sigterm_releases_its_lease_for_the_other_to_take_at_once(
    replicas: Replicas,
) -> None:
    replicas.start()
    stopped = replicas.sender()
    process = replicas.processes[stopped]
    asked_at = time.monotonic()
    assert process.stop() == 0
    assert f"replica {stopped} released the sender's lease" in process.log()
    # Taken at the other's next try (every LEASE/3), not when the lease would have run out.
    replicas.survivor_takes_over(stopped, asked_at, how="SIGTERM")

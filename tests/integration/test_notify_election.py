"""The sender's lease and the fenced channel state in a real PostgreSQL store:
one holder at a time, a token that grows at each change of holder, and a write
under a stale token that changes nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lockwatch.demo.pgcluster import free_port
from lockwatch.model.incidents import Incident, IncidentChanges
from lockwatch.notify.election import Election
from lockwatch.notify.service import AlertNotifier
from lockwatch.settings.notify import NotifySettings, TelegramChannel
from lockwatch.state.notify_store import NotifyStore
from tests.fixtures.incident_values import incident
from tests.fixtures.postgres import PgDatabase, wait_until
from tests.fixtures.snapshots import TARGET
from tests.fixtures.standins import ChatStandin, telegram_flood

pytestmark = [pytest.mark.pg]

SCOPE = "all"
SHORT = 0.3  # seconds: a lease that runs out while the test watches


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(pg: PgDatabase) -> Iterator[NotifyStore]:
    made = NotifyStore(pg.admin_dsn, timeout=2)
    yield made
    made.close()


def test_one_holder_at_a_time_and_the_token_grows_when_the_lease_changes_hands(
    store: NotifyStore,
) -> None:
    assert store.acquire(SCOPE, "a", 30) == 1
    assert store.acquire(SCOPE, "b", 30) is None
    assert store.acquire(SCOPE, "a", SHORT) == 1, "a renewal keeps the token"
    taken = wait_until(lambda: store.acquire(SCOPE, "b", 30), message="b takes the lapsed lease")
    assert taken == 2
    assert store.acquire(SCOPE, "a", 30) is None
    assert store.holder(SCOPE) == ("b", 2, True)


def test_a_write_under_a_stale_token_is_refused_and_the_holders_is_kept(
    store: NotifyStore,
) -> None:
    old = store.acquire(SCOPE, "a", SHORT)
    assert old is not None
    assert store.save(SCOPE, "ops", {"by": "a"}, "a", old)
    new = wait_until(lambda: store.acquire(SCOPE, "b", 30), message="b takes over")
    assert store.save(SCOPE, "ops", {"by": "b"}, "b", new)
    assert not store.save(SCOPE, "ops", {"by": "a, too late"}, "a", old)
    assert not store.save(SCOPE, "ops", {"by": "a, claiming b's token"}, "a", new)
    assert store.load(SCOPE, "ops") == {"by": "b"}


def test_a_holder_whose_lease_lapsed_cannot_write_even_before_anyone_takes_over(
    store: NotifyStore,
) -> None:
    token = store.acquire(SCOPE, "a", SHORT)
    assert token is not None
    wait_until(lambda: not store.save(SCOPE, "ops", {"n": 1}, "a", token), message="lapsed")
    assert store.acquire(SCOPE, "a", 30) == token + 1, "a new term, even for the same holder"


def test_scopes_elect_their_senders_apart(store: NotifyStore) -> None:
    assert store.acquire("0/2", "a", 30) == 1
    assert store.acquire("1/2", "b", 30) == 1
    assert store.load("0/2", "ops") is None


def test_a_stopped_sender_releases_its_lease_and_the_standby_takes_over_at_its_next_try(
    pg: PgDatabase,
) -> None:
    first = Election(NotifyStore(pg.admin_dsn), SCOPE, "replica-a", 30)
    second = Election(NotifyStore(pg.admin_dsn), SCOPE, "replica-b", 30)
    first.try_once()
    second.try_once()
    assert (first.sender, second.sender) == (True, False)
    token = first.term
    assert token is not None
    first.stop(timeout=1)
    assert not first.sender
    second.try_once()
    assert second.term == token + 1
    assert (first.changes_total, second.changes_total) == (2, 1)
    assert not first.save("ops", {"stale": True}, token)
    assert second.save("ops", {"n": 1}, token + 1)
    second.stop(timeout=1)


def test_a_sender_starts_a_send_only_while_its_lease_outlasts_it(pg: PgDatabase) -> None:
    clock = FakeMonotonic()
    election = Election(NotifyStore(pg.admin_dsn), SCOPE, "replica-a", 30, monotonic=clock)
    election.try_once()
    clock.now += 10
    assert election.may_send(14)
    clock.now += 7  # 13 s of lease left, on this replica's clock
    assert (election.may_send(14), election.sender) == (False, True)
    clock.now += 13
    assert (election.sender, election.term) == (False, None)
    election.try_once()  # renewed: the same holder, unbroken in the database's eyes
    assert election.may_send(14)
    election.stop(timeout=1)


def test_an_unreachable_store_means_standing_by_and_counting_errors_never_a_crash() -> None:
    dsn = f"host=127.0.0.1 port={free_port()} dbname=x user=x connect_timeout=1"
    election = Election(NotifyStore(dsn, timeout=1), SCOPE, "replica-a", 3)
    election.try_once()
    assert not election.sender
    assert election.errors_total == 1
    assert not election.save("ops", {}, 1)
    election.stop(timeout=1)


def poll(alerts: AlertNotifier, active: list[Incident]) -> None:
    """A replica's poll: its open incidents handed over, then a step of its worker."""
    alerts(IncidentChanges(TARGET, active=tuple(active)))
    for worker in alerts.workers:
        worker.step()


def test_a_standby_sends_nothing_and_the_next_sender_delivers_the_last_ones_pending_message_once(
    pg: PgDatabase, standin: ChatStandin
) -> None:
    clock_a = FakeMonotonic()
    a = Election(NotifyStore(pg.admin_dsn), SCOPE, "a", 30, monotonic=clock_a)
    b = Election(NotifyStore(pg.admin_dsn), SCOPE, "b", 30)
    ops = TelegramChannel("ops", standin.token, standin.chat_id, standin.telegram_api)
    settings = NotifySettings(channels=(ops,), connect_timeout=1, read_timeout=0.5)
    first, second = (AlertNotifier(settings, None, targets=[TARGET], election=e) for e in (a, b))
    a.try_once()
    b.try_once()
    # One incident, as each replica names it: the same root, another id.
    seen_by_a, seen_by_b = incident(id="a-1"), incident(id="b-1")
    standin.reply(telegram_flood(retry_after=120), service="telegram")
    poll(first, [seen_by_a])
    poll(second, [seen_by_b])
    assert [r.status for r in standin.requests("telegram")] == [429]
    assert (first.workers[0].pending, second.workers[0].pending) == (1, 0)

    # a stops renewing (killed): its lease runs out, on its clock and the store's.
    clock_a.now += 30
    pg.connect().execute("UPDATE lockwatch_notify_leases SET expires_at = now()")
    b.try_once()
    assert (a.sender, b.sender) == (False, True)
    poll(first, [seen_by_a])  # a zombie a sends nothing, though its retry may fall due
    poll(second, [seen_by_b])
    assert [r.status for r in standin.requests("telegram")] == [429, 200]
    assert (first.workers[0].pending, second.workers[0].pending) == (0, 0)

    poll(second, [])
    texts = [r.text for r in standin.delivered("telegram")]
    assert [t.split(":")[0] for t in texts] == ["🔥 OPENED", "✅ RESOLVED"]
    assert all(" · incident a-1" in text for text in texts), "told under the id first heard"
    for alerts in (first, second):
        alerts.stop(timeout=1)

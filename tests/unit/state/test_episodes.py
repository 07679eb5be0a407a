"""Blocking episodes poll by poll on synthetic snapshots: what one costs and
carries, when it ends, and how it reaches its root's incident."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from lockwatch.detect.incidents import tell_incidents
from lockwatch.detect.lock_waits import detect_lock_waits
from lockwatch.model.incident_text import root_labels
from lockwatch.model.incidents import incident_json, load_incident
from lockwatch.model.lock_waits import LockRowFact, lock_waits
from lockwatch.model.locks import LockSnapshot
from lockwatch.settings.locks import LockSettings
from lockwatch.state.episodes import BlockingEpisodes, root_fingerprint
from lockwatch.state.incidents import IncidentBook
from tests.fixtures.snapshots import NOW, TARGET, ago, backend, held, snapshot, waiting

TABLE = "relation:5:16384"
GAP = 30.0


def alter_queue(now: datetime, readers: int, *, waited: float = 10.0) -> LockSnapshot:
    """pid 1 idle in transaction holding the table; pid 2's ALTER waits; ``readers`` behind it."""
    rows = [
        LockRowFact(1, "relation", TABLE, "AccessShareLock", True),
        LockRowFact(2, "relation", TABLE, "AccessExclusiveLock", False, ago(waited, now), "jobs"),
        *(
            LockRowFact(
                10 + n, "relation", TABLE, "AccessShareLock", False, ago(waited / 2, now), "jobs"
            )
            for n in range(readers)
        ),
    ]
    backends = [
        backend(
            1,
            "report",
            state="idle in transaction",
            idle_for=50,
            xact_for=60,
            query="SELECT count(*) FROM jobs WHERE owner = 'alice'",
            now=now,
        ),
        backend(2, "migration", query="ALTER TABLE jobs ADD COLUMN note text", now=now),
        *(
            backend(10 + n, "worker", query=f"SELECT * FROM jobs WHERE id = {n}", now=now)
            for n in range(readers)
        ),
    ]
    # The same sessions at every poll: connected an hour before NOW.
    same = [replace(b, backend_start=ago(3600)) for b in backends]
    return replace(snapshot(backends=same, now=now), waits=lock_waits(rows))


def quiet(now: datetime) -> LockSnapshot:
    return snapshot(backends=[backend(1, "report", now=now)], now=now)


def test_an_episode_sums_each_waiter_s_time_and_names_the_queries_without_their_values() -> None:
    episodes = BlockingEpisodes(TARGET, GAP)
    first = episodes.observe(alter_queue(NOW, 2), NOW)
    later = NOW + timedelta(seconds=2)
    (episode,) = episodes.observe(alter_queue(later, 3), later).values()

    assert list(first) == [root_fingerprint(TARGET, (1, ago(3600.0)))]
    # First sight: each wait since it began (10 + 5 + 5); then each of the
    # four since the last poll (2 s), the one that began since included.
    assert episode.waiter_seconds == 10 + 5 + 5 + 2 * 4
    assert (episode.max_waiters, episode.started_at, episode.last_seen_at) == (4, ago(10), later)
    assert (episode.blocker_xact_seconds, episode.blocker_idle_in_transaction_seconds) == (60, 50)
    assert episode.blocker_fingerprint == "SELECT count(*) FROM jobs WHERE owner = ?"
    assert [(q.fingerprint, q.most_at_once) for q in episode.waiter_queries] == [
        ("SELECT * FROM jobs WHERE id = ?", 3),
        ("ALTER TABLE jobs ADD COLUMN note text", 1),
    ]
    assert (episode.locktypes, episode.relations, episode.ended) == (
        ("relation",),
        ("jobs",),
        False,
    )


def test_an_episode_ends_after_a_quiet_gap_and_waits_after_it_begin_another() -> None:
    episodes = BlockingEpisodes(TARGET, GAP)
    episodes.observe(alter_queue(NOW, 2), NOW)
    within = NOW + timedelta(seconds=GAP - 1)
    assert episodes.observe(quiet(within), within) == {}  # quiet, not yet ended
    back = within + timedelta(seconds=1)
    (same,) = episodes.observe(alter_queue(back, 2, waited=0.5), back).values()
    assert same.started_at == ago(10)  # within the gap: the same episode goes on
    after = back + timedelta(seconds=GAP)
    (ended,) = episodes.observe(quiet(after), after).values()
    assert ended.ended and ended.last_seen_at == back
    again = after + timedelta(seconds=1)
    (new,) = episodes.observe(alter_queue(again, 1, waited=0.5), again).values()
    assert new.started_at == ago(0.5, again) and not new.ended


def test_a_poll_with_no_wait_and_no_episode_going_on_tells_nothing() -> None:
    episodes = BlockingEpisodes(TARGET, GAP)
    assert episodes.observe(quiet(NOW), NOW) == {}
    assert episodes.observe(None, NOW) == {}


def test_advisory_waits_are_episodes_of_their_holder() -> None:
    snap = snapshot(
        held(42, 1234, held_for=100),
        *(waiting(42, pid, waited_for=20) for pid in (1301, 1302)),
        backends=[
            backend(1234, "webhook-worker-6", idle_for=90, query="SELECT pg_advisory_lock(42)"),
            backend(1301, "webhook-worker-1", waits_on=[1234]),
            backend(1302, "webhook-worker-2", waits_on=[1234]),
        ],
    )
    (episode,) = BlockingEpisodes(TARGET, GAP).observe(snap, NOW).values()
    assert (episode.pid, episode.max_waiters, episode.waiter_seconds) == (1234, 2, 40.0)
    assert episode.locktypes == ("advisory",)
    assert episode.blocker_fingerprint == "SELECT pg_advisory_lock(?)"


@given(st.lists(st.integers(min_value=0, max_value=6), min_size=1, max_size=12))
def test_waiter_seconds_never_exceed_the_time_each_waiter_could_have_waited(
    readers: list[int],
) -> None:
    episodes = BlockingEpisodes(TARGET, GAP)
    now, told = NOW, None
    for count in readers:
        told = episodes.observe(alter_queue(now, count), now) or told
        now += timedelta(seconds=1)
    assert told is not None
    (episode,) = told.values()
    # Each waiter has waited at most since its start, and at most 1 + max readers wait.
    bound = (10 + 5 * max(readers)) + (len(readers) - 1) * (1 + max(readers))
    assert 0 < episode.waiter_seconds <= bound
    assert episode.max_waiters == 1 + max(readers)


def test_the_episode_rides_on_its_root_s_incident_and_ends_with_it() -> None:
    book = IncidentBook(TARGET, episode_gap=GAP)
    settings = LockSettings(queue_wait=0.0)
    snap = alter_queue(NOW, 2)
    groups = tell_incidents(detect_lock_waits(snap, settings, NOW), snap)
    changes = book.update(groups, NOW, 0.0, snapshot=snap)
    (incident,) = changes.opened
    (episode,) = incident.episodes
    assert (episode.pid, episode.max_waiters, episode.ended) == (1, 3, False)
    # The blocker's fingerprint, a bounded label on the incident's series and its alert.
    blocking = "SELECT count(*) FROM jobs WHERE owner = ?"
    assert incident.naming.blocking_query == blocking
    assert root_labels(incident)["blocking_query"] == blocking
    later = NOW + timedelta(seconds=2)
    (resolved,) = book.update([], later, 2.0, snapshot=quiet(later)).resolved
    (kept,) = resolved.episodes
    assert kept.ended and kept.started_at == episode.started_at
    again = load_incident(incident_json(resolved))
    assert again is not None and again.episodes == resolved.episodes

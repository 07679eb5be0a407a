"""One hold of one key by one session: no lock finding fires and resolves more
than once (issue 18, part 3), over synthetic polls of a session that goes idle,
runs statements, sits in transactions, while waiters come and go."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from lockwatch.detect.locks import detect_locks
from lockwatch.detect.within_hold import HoldMemory, within_hold
from lockwatch.model.findings import FindingKind
from lockwatch.model.locks import AdvisoryLock, Backend, LockSnapshot
from lockwatch.settings.locks import AllowedHolders, LockSettings, NamedLock
from lockwatch.state.ledger import FindingLedger
from tests.fixtures.snapshots import NOW, TARGET, backend, held, key, snapshot, waiting

SETTINGS = LockSettings(max_hold=60.0, orphan_after=120.0, convoy_waiters=2, convoy_wait=5.0)
HOLDER = 1234


@dataclass(frozen=True)
class Step:
    seconds: float  # since the last poll
    state: str  # what the holder did meanwhile: idle, ran a statement, is running one
    waiters: int  # sessions waiting on the key at this poll


steps = st.lists(
    st.builds(
        Step,
        st.floats(0.5, 40.0),
        st.sampled_from(("idle", "ran", "running", "idle in transaction")),
        st.integers(0, 3),
    ),
    min_size=1,
    max_size=40,
)


class Hold:
    """The holder's session and the polls of lockwatch over one hold of key 42."""

    def __init__(self, lock_settings: LockSettings) -> None:
        self.settings = lock_settings
        self.now = NOW
        self.session: Backend = backend(HOLDER, "report-worker", idle_for=0.0, now=NOW)
        self.first_seen = NOW
        self.ledger = FindingLedger(TARGET)
        self.memory: HoldMemory = {}
        self.fired: Counter[FindingKind] = Counter()
        self.resolved: Counter[FindingKind] = Counter()

    def advance(self, step: Step) -> None:
        self.now += timedelta(seconds=step.seconds)
        if step.state == "idle":
            return  # nothing happened: still whatever it was
        started = self.now - timedelta(seconds=step.seconds / 2)
        if step.state == "ran":  # a short statement between two polls, idle again
            self.session = replace(
                self.session, state="idle", query_start=started, state_change=self.now
            )
        elif step.state == "running":
            self.session = replace(
                self.session, state="active", query_start=started, state_change=started
            )
        else:
            self.session = replace(
                self.session,
                state="idle in transaction",
                xact_start=started,
                query_start=started,
                state_change=self.now,
            )

    def snap(self, waiters: int, holding: bool = True) -> LockSnapshot:
        locks: list[AdvisoryLock] = []
        if holding:
            lock = held(42, HOLDER, held_for=None, now=self.now)
            locks.append(replace(lock, first_seen=self.first_seen))
        others = [backend(2000 + n, now=self.now) for n in range(waiters)]
        for n in range(waiters):
            waited = (self.now - NOW).total_seconds() * (n + 1) / (waiters + 1)
            locks.append(waiting(42, 2000 + n, waited_for=waited, now=self.now))
        return snapshot(*locks, backends=[self.session, *others], now=self.now)

    def poll(self, snap: LockSnapshot) -> None:
        findings = detect_locks(snap, self.settings, self.now)
        holds, self.memory = within_hold(findings, self.memory, snap, self.settings)
        transitions = self.ledger.update(findings, hold=holds)
        self.fired.update(f.kind for f in transitions.fired)
        self.resolved.update(f.kind for f in transitions.resolved)


def replay(hold: Hold, polls: list[Step]) -> None:
    hold.poll(hold.snap(0))
    for step in polls:
        hold.advance(step)
        hold.poll(hold.snap(step.waiters))
        assert all(count == 1 for count in hold.fired.values()), hold.fired
        assert not hold.resolved, hold.resolved


@settings(max_examples=300, deadline=None)
@given(steps)
def test_within_one_hold_each_finding_fires_at_most_once_and_never_resolves(
    polls: list[Step],
) -> None:
    hold = Hold(SETTINGS)
    replay(hold, polls)
    active = set(hold.fired)
    hold.poll(hold.snap(0, holding=False))  # the holder lets go
    assert set(hold.resolved) == active
    assert all(count == 1 for count in hold.resolved.values())


@settings(max_examples=100, deadline=None)
@given(steps)
def test_a_stranger_holding_a_named_lock_is_one_finding_per_hold(polls: list[Step]) -> None:
    named = NamedLock(
        "nightly-report", key(42), max_hold=30.0, allowed=AllowedHolders(applications=("cron-*",))
    )
    hold = Hold(replace(SETTINGS, named=(named,)))
    replay(hold, polls)
    assert hold.fired[FindingKind.LOCK_UNEXPECTED_HOLDER] == 1


def test_a_busy_pooled_client_holding_a_lock_is_one_orphan_from_orphan_after_on() -> None:
    """Seed 003 on a busy pool: the client is lent out every few seconds, so it is
    never idle for long, but every statement since the lock is another's."""
    hold = Hold(SETTINGS)
    polls = [Step(3.0, "ran", 0)] * 100  # 300 s, never idle more than 3 s
    orphaned_at = None
    hold.poll(hold.snap(0))
    for step in polls:
        hold.advance(step)
        hold.poll(hold.snap(0))
        if orphaned_at is None and hold.fired[FindingKind.LOCK_ORPHANED]:
            orphaned_at = (hold.now - NOW).total_seconds()
    assert orphaned_at is not None
    # The first poll past orphan_after says it: no waiting for an idle stretch.
    assert SETTINGS.static_orphan_after < orphaned_at <= SETTINGS.static_orphan_after + 3.0
    assert hold.fired[FindingKind.LOCK_ORPHANED] == 1 and not hold.resolved
    hold.poll(hold.snap(0, holding=False))
    assert hold.resolved[FindingKind.LOCK_ORPHANED] == 1


def test_a_session_still_in_the_statement_that_took_the_lock_is_no_orphan() -> None:
    hold = Hold(SETTINGS)
    hold.session = replace(hold.session, state="active", state_change=NOW, query_start=NOW)
    hold.poll(hold.snap(0))
    hold.advance(Step(600.0, "idle", 0))  # "idle": nothing changed, still running it
    hold.poll(hold.snap(0))
    assert FindingKind.LOCK_ORPHANED not in hold.fired
    assert hold.fired[FindingKind.LOCK_HELD_TOO_LONG] == 1

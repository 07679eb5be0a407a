"""The metrics' shortcuts over many locks give what the long way gives."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lockwatch.model.evidence import LockHolderFacts, QueueLockChain, QueueStallEvidence
from lockwatch.model.locks import LockSnapshot
from lockwatch.publish.api.locks import lock_counts, lock_groups
from lockwatch.publish.metrics.locks import exported_locks, holder_label
from lockwatch.settings.locks import LockSettings, NamedLock
from tests.fixtures.evidence import holder, lock_evidence, queue_evidence
from tests.fixtures.snapshots import DB, NOW, lock_keys, lock_snapshots


@st.composite
def snapshots_with_settings(draw: st.DrawFn) -> tuple[LockSnapshot, LockSettings]:
    snap = draw(lock_snapshots(max_age=1000.0))
    keys = sorted({lock.key for lock in snap.locks} | {draw(lock_keys)})
    some_keys = st.lists(st.sampled_from(keys), unique=True, max_size=3)
    named = tuple(
        NamedLock(
            f"lock-{i}",
            k,
            database=draw(st.sampled_from((None, DB))),
            ignore=draw(st.booleans()),
        )
        for i, k in enumerate(draw(some_keys))
    )
    return snap, LockSettings(
        top_n=draw(st.integers(0, 4)), ignore=tuple(draw(some_keys)), named=named
    )


@settings(max_examples=200, deadline=None)
@given(snapshots_with_settings())
def test_building_only_the_top_groups_exports_the_same_series(
    case: tuple[LockSnapshot, LockSettings],
) -> None:
    snap, settings_ = case
    every_group = lock_groups(snap, settings_, NOW)
    top_groups = lock_groups(snap, settings_, NOW, top=settings_.top_n, unnamed_top=True)
    assert exported_locks(top_groups, settings_) == exported_locks(every_group, settings_)


@settings(max_examples=200, deadline=None)
@given(snapshots_with_settings())
def test_counting_rows_matches_counting_the_groups(
    case: tuple[LockSnapshot, LockSettings],
) -> None:
    snap, settings_ = case
    expected: dict[str, tuple[int, int]] = {}
    for group in lock_groups(snap, settings_, NOW):
        if not group.ignored:
            held, waiting = expected.get(group.database, (0, 0))
            expected[group.database] = (held + len(group.holders), waiting + len(group.waiters))
    assert lock_counts(snap, settings_) == expected


def test_the_holder_label_names_the_blamed_holder_on_one_line() -> None:
    evidence = lock_evidence(
        holder_pid=7,
        holders=(
            holder(6),
            holder(7, application_name="worker\n<b>", client_addr=None),
        ),
    )
    assert holder_label(evidence) == "pid 7 (worker <b> from local socket)"


def lock_holder(pid: int) -> LockHolderFacts:
    """A session of which lockwatch knows the address alone."""
    return LockHolderFacts(pid, None, "10.0.0.5", None, None, None, None, None, (), None, None)


def test_the_holder_label_of_a_stall_names_the_holder_of_the_lock_it_waits_on() -> None:
    chain = QueueLockChain("app", "42", "42", 5, 6, (lock_holder(9),))
    evidence = QueueStallEvidence.of(queue_evidence(), chain)
    assert holder_label(evidence) == "pid 9 (no application_name from 10.0.0.5)"

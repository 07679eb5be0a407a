"""A flood: thousands of keys held alike by a few sessions are judged by
building only the groups their holders' findings list, and come out exactly
as if every key's group had been built and judged."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any
from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

from lockwatch.detect import key_groups, lock_groups, lock_holders
from lockwatch.detect import locks as locks_module
from lockwatch.detect.locks import detect_locks
from lockwatch.model.evidence import LockEvidence
from lockwatch.model.findings import Finding, FindingKind, Severity
from lockwatch.model.locks import LockSnapshot
from lockwatch.settings.locks import LockSettings
from tests.fixtures.evidence import evidence_as
from tests.fixtures.snapshots import NOW, backend, held, held_by, snapshot, waiting

SETTINGS = LockSettings(max_hold=60, orphan_after=3600)


def every_group_built(
    snap: LockSnapshot,
    settings_: LockSettings,
    now: Any,
    pooled: Any,
    history: Any,
    built: Any,
    on_purpose: Any,
    plan: Any = None,
) -> Iterator[lock_groups.KeyGroup]:
    """key_groups as it would be without ``Alike``: every group built."""
    for item in key_groups.key_groups(
        snap, settings_, now, pooled, history, built=None, on_purpose=on_purpose
    ):
        assert isinstance(item, lock_groups.KeyGroup)
        yield item


def judged_one_by_one(snap: LockSnapshot) -> list[Finding]:
    with patch.object(locks_module, "key_groups", every_group_built):
        return detect_locks(snap, SETTINGS, NOW)


def test_one_session_holding_thousands_of_keys_is_one_finding_building_one_group() -> None:
    count = 5_000
    locks = [held(k, 1000, held_for=900) for k in range(1, count + 1)]
    built = []
    build = key_groups._Builder.__call__

    def counted(self: key_groups._Builder, *args: Any) -> lock_groups.KeyGroup:
        built.append(args[1])
        return build(self, *args)

    with patch.object(key_groups._Builder, "__call__", counted):
        findings = detect_locks(snapshot(*locks, backends=[backend(1000)]), SETTINGS, NOW)

    (finding,) = findings
    facts = evidence_as(finding, LockEvidence)
    assert (finding.kind, finding.severity) == (FindingKind.LOCK_HELD_TOO_LONG, Severity.WARNING)
    assert finding.subject == held_by(1000)
    assert facts.held_keys == count
    assert facts.first_keys == tuple(f"app/{k}" for k in range(1, lock_holders.KEYS_LISTED + 1))
    assert len(built) == 1, "the lowest key built, the next listed, the rest counted"


@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=400), min_size=1, max_size=4),
    ages=st.lists(st.sampled_from([30.0, 120.0, 900.0, 5000.0]), min_size=4, max_size=4),
    idle=st.lists(st.booleans(), min_size=4, max_size=4),
    queued=st.integers(min_value=0, max_value=1600),
)
def test_keys_held_alike_come_out_as_if_each_were_judged_on_its_own(
    sizes: list[int], ages: list[float], idle: list[bool], queued: int
) -> None:
    rows = []
    first = 1
    for n, size in enumerate(sizes):
        rows += [held(k, 1000 + n, held_for=ages[n]) for k in range(first, first + size)]
        first += size
    if 0 < queued < first:
        rows.append(waiting(queued, 2000, waited_for=10))  # that key is no longer alike
    backends = [backend(1000 + n, idle_for=ages[n] if idle[n] else None) for n in range(len(sizes))]
    snap = snapshot(*rows, backends=[*backends, backend(2000, waits_on=[1000])])

    assert detect_locks(snap, SETTINGS, NOW) == judged_one_by_one(snap)


def test_a_steady_flood_sorts_its_rows_once_and_judges_them_as_new_each_poll() -> None:
    locks = tuple(held(k, 1000 + k % 4, held_for=900) for k in range(1, 2001))
    snap = snapshot(*locks, backends=[backend(1000 + n, idle_for=800) for n in range(4)])
    plan = key_groups.RowPlan()
    sorted_rows = key_groups._sorted_rows
    sortings = []

    def counted(*args: Any) -> key_groups.RowPlan:
        sortings.append(args)
        return sorted_rows(*args)

    with patch.object(key_groups, "_sorted_rows", counted):
        for later in (0, 60, 600):
            now = NOW + timedelta(seconds=later)
            steady = replace(snap, taken_at=now)  # the very same locks, polled again
            assert detect_locks(steady, SETTINGS, now, plan=plan) == detect_locks(
                steady, SETTINGS, now
            )
    assert len(sortings) == 4, "once for the plan, once for each poll without one"
    churned = snapshot(*locks[1:], backends=[backend(1000 + n) for n in range(4)])
    assert detect_locks(churned, SETTINGS, NOW, plan=plan) == detect_locks(churned, SETTINGS, NOW)

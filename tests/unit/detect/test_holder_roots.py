"""No leaking session hides another (issue 28 item 1, issue 31 item 1): however
many sessions hold judged locks, and however many locks each holds, every one
of them is the root of exactly one open incident, and the counts it carries
are its own."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockwatch.detect import lock_holders
from lockwatch.detect.incidents import tell_incidents
from lockwatch.detect.locks import detect_locks
from lockwatch.model.evidence import LockEvidence
from lockwatch.model.incidents import RootKind
from lockwatch.model.locks import AdvisoryLock
from lockwatch.settings.locks import LockSettings
from lockwatch.state.incidents import IncidentBook
from tests.fixtures.evidence import evidence_as
from tests.fixtures.snapshots import NOW, TARGET, backend, held, held_by, snapshot

# Held too long past a minute, orphaned past two: both kinds judge every lock.
JUDGED = LockSettings(max_hold=60.0, orphan_after=120.0)

# How many locks each session holds, and
# how long it has been idle (None: running SQL, so only held too long).
sessions_strategy = st.lists(
    st.tuples(
        st.integers(min_value=1, max_value=160),
        st.one_of(st.none(), st.integers(min_value=200, max_value=900)),
        st.integers(min_value=61, max_value=900),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=40, deadline=None)
@given(sessions=sessions_strategy, interleave=st.booleans())
def test_every_holding_session_is_the_root_of_one_incident_with_its_own_counts(
    sessions: list[tuple[int, int | None, int]], interleave: bool
) -> None:
    locks: list[AdvisoryLock] = []
    backends = []
    next_key = 1
    for index, (count, idle_for, held_for) in enumerate(sessions):
        pid = 2000 + index
        backends.append(backend(pid, f"worker-{index}", idle_for=idle_for))
        locks.extend(held(next_key + k, pid, held_for=held_for) for k in range(count))
        next_key += count
    if interleave:  # the server's order of rows is no order at all
        locks.sort(key=lambda lock: (lock.key.first % 7, lock.key.first))
    snap = snapshot(*locks, backends=backends)

    findings = detect_locks(snap, JUDGED, NOW)
    book = IncidentBook(TARGET)
    changes = book.update(tell_incidents(findings, snap), NOW, 0.0)

    roots = [i.root for i in changes.active]
    assert all(root.kind is RootKind.SESSION for root in roots), roots
    by_pid = {root.pid or 0: incident for root, incident in zip(roots, changes.active, strict=True)}
    assert len(by_pid) == len(roots), "one incident per session"
    assert sorted(by_pid) == [2000 + index for index in range(len(sessions))]
    for index, (count, _, _) in enumerate(sessions):
        incident = by_pid[2000 + index]
        assert incident.impact.locks_held == count, (index, incident.title)
        assert f"pid {2000 + index}" in incident.title
        # One finding per kind about the session, counting its own keys.
        own = [f for f in findings if evidence_as(f, LockEvidence).holder_pid == 2000 + index]
        assert len(own) == len({f.kind for f in own})
        assert all(evidence_as(f, LockEvidence).held_keys == count for f in own)
        assert all(f.subject == held_by(2000 + index) for f in own)


def test_past_the_bound_on_holders_one_incident_says_how_many_more_sessions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lock_holders, "HOLDERS_PER_KIND", 3)
    # Session 2000 holds 10 keys, sessions 2001..2005 one each: 6 holders.
    locks = [held(k, 2000, held_for=900) for k in range(1, 11)]
    locks += [held(10 + n, 2000 + n, held_for=900) for n in range(1, 6)]
    snap = snapshot(*locks, backends=[backend(2000 + n) for n in range(6)])
    findings = detect_locks(snap, LockSettings(max_hold=60.0, orphan_after=3600.0), NOW)

    changes = IncidentBook(TARGET).update(tell_incidents(findings, snap), NOW, 0.0)

    sessions = [i for i in changes.active if i.root.kind is RootKind.SESSION]
    (beyond,) = [i for i in changes.active if i.root.kind is RootKind.LOCK]
    assert len(sessions) == 3
    assert "and 3 more sessions hold advisory locks" in beyond.title
    assert beyond.next_step.action.startswith("list the sessions holding advisory locks")

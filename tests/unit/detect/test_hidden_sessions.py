"""Sessions lockwatch's role may not see (no pg_monitor): pg_stat_activity gives
their pid, user and application_name and NULL for the rest. Evidence says they
are hidden, the detectors judge nothing hidden, and the target says why."""

from __future__ import annotations

import doctest
import ipaddress
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from lockwatch.detect import targets as targets_module
from lockwatch.detect.lock_groups import Holder
from lockwatch.detect.locks import detect_locks
from lockwatch.detect.pooler import session_level
from lockwatch.detect.targets import detect_privileges_missing
from lockwatch.model.evidence import LockEvidence, PrivilegesMissingEvidence
from lockwatch.model.findings import FindingKind, Severity, Subject
from lockwatch.model.locks import HIDDEN, HIDDEN_SESSION_LOSSES, Backend, SessionVisibility
from lockwatch.settings.locks import AllowedHolders, LockSettings, NamedLock
from tests.fixtures.evidence import evidence_as
from tests.fixtures.snapshots import NOW, backend, held, key, snapshot

LOOPBACK = AllowedHolders(networks=(ipaddress.ip_network("127.0.0.0/8"),))
LOCAL_ONLY = AllowedHolders(local=True)
REPORTS_ONLY = AllowedHolders(applications=("report-*",), local=True)


def hidden(pid: int, app: str = "report-1") -> Backend:
    """A session as the server shows it to a role without pg_monitor."""
    return replace(
        backend(pid, app, addr=None, state=None, query=""),
        backend_start=None,
        state_change=None,
        query_start=None,
        visible=False,
    )


def named(allowed: AllowedHolders, **budgets: float) -> LockSettings:
    return LockSettings(
        named=(NamedLock("sweep", key(42), allowed=allowed, **budgets),)  # type: ignore[arg-type]
    )


def kinds_of(settings: LockSettings, *backends: Backend) -> list[FindingKind]:
    snap = snapshot(held(42, 7, held_for=30), backends=backends)
    return [f.kind for f in detect_locks(snap, settings, NOW)]


def test_a_hidden_address_is_no_stranger_to_an_address_allow_list() -> None:
    # NULL, as a local socket's would be: before, a false stranger from 127.0.0.1.
    assert kinds_of(named(LOOPBACK), hidden(7)) == []
    assert kinds_of(named(LOCAL_ONLY), hidden(7)) == []


def test_a_hidden_session_is_still_judged_by_its_application_name_which_is_shown() -> None:
    assert kinds_of(named(REPORTS_ONLY), hidden(7, "report-9")) == []
    assert kinds_of(named(REPORTS_ONLY), hidden(7, "dev-laptop")) == [
        FindingKind.LOCK_UNEXPECTED_HOLDER
    ]


def test_a_seen_session_is_judged_by_its_address() -> None:
    # The same holder seen whole: from 127.0.0.1 it is allowed, on a local-only lock not.
    seen = backend(7, "report-1", addr="127.0.0.1")
    assert kinds_of(named(LOOPBACK), seen) == []
    assert kinds_of(named(LOCAL_ONLY), seen) == [FindingKind.LOCK_UNEXPECTED_HOLDER]


def test_a_hidden_holder_is_never_an_orphan_however_long_it_holds() -> None:
    settings = named(AllowedHolders(), orphan_after=1.0)
    assert kinds_of(settings, hidden(7)) == []
    assert kinds_of(settings, backend(7, idle_for=20)) == [FindingKind.LOCK_ORPHANED]


def test_a_long_hold_by_a_hidden_holder_says_hidden_not_local_socket() -> None:
    snap = snapshot(held(42, 7, held_for=400), backends=[hidden(7)])
    [finding] = detect_locks(snap, LockSettings(), NOW)
    assert finding.kind is FindingKind.LOCK_HELD_TOO_LONG
    assert finding.summary == (
        f"lock 42 in app held 6m40s by pid 7 (report-1 from {HIDDEN}), activity {HIDDEN}; budget 5m"
    )
    [holder] = evidence_as(finding, LockEvidence).holders
    assert (holder.client_addr, holder.state, holder.query) == (HIDDEN, HIDDEN, HIDDEN)
    assert (holder.application_name, holder.state_seconds) == ("report-1", None)


@given(st.sampled_from((LOOPBACK, LOCAL_ONLY, AllowedHolders())), st.floats(0, 1e6))
def test_no_hidden_fact_ever_makes_a_stranger_or_an_orphan(
    allowed: AllowedHolders, held_for: float
) -> None:
    snap = snapshot(held(42, 7, held_for=held_for), backends=[hidden(7)])
    found = detect_locks(snap, named(allowed, orphan_after=1.0), NOW)
    assert not {f.kind for f in found} & {
        FindingKind.LOCK_UNEXPECTED_HOLDER,
        FindingKind.LOCK_ORPHANED,
    }


def test_a_role_that_sees_every_session_or_is_not_known_yet_raises_nothing() -> None:
    assert detect_privileges_missing("main", None, NOW) == []
    assert detect_privileges_missing("main", SessionVisibility("mon", True), NOW) == []


def test_a_role_that_cannot_see_other_sessions_is_a_finding_on_the_target() -> None:
    [finding] = detect_privileges_missing("main", SessionVisibility("Mon", False), NOW)
    assert finding.kind is FindingKind.TARGET_PRIVILEGES_MISSING
    assert (finding.target, finding.subject, finding.severity) == (
        "main",
        Subject(),
        Severity.WARNING,
    )
    evidence = evidence_as(finding, PrivilegesMissingEvidence)
    assert evidence.role == "Mon"
    assert evidence.grant == 'GRANT pg_monitor TO "Mon"'
    assert evidence.meanwhile == HIDDEN_SESSION_LOSSES
    assert "lacks pg_monitor" in finding.summary and evidence.grant in finding.summary


def test_the_module_doctests_pass() -> None:
    result = doctest.testmod(targets_module)
    assert result.attempted > 0
    assert result.failed == 0


def test_a_hidden_transaction_is_no_proof_of_a_session_lock() -> None:
    # xact_start is NULL when hidden, as it is for a session with no transaction open.
    lock = held(42, 7, held_for=30)
    assert not session_level(Holder(lock, hidden(7), 30.0, None))
    assert session_level(Holder(lock, backend(7, idle_for=5), 30.0, 5.0))

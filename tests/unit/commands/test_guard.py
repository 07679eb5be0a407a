"""``lockwatch terminate``'s judgement on synthetic looks: each refusal is the
one that fits what the server shows, and the cost follows the holder's state."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from lockwatch.commands.guard import (
    HeldNow,
    Look,
    PreparedNow,
    RoleFacts,
    SessionNow,
    cost,
    fits,
    judge,
)
from lockwatch.model.actions import ActionKind, Verdict
from lockwatch.model.evidence import LockEvidence, PreparedFacts
from lockwatch.model.incidents import IncidentRoot, RootKind
from tests.fixtures.incident_values import BACKEND_START, incident, resolved
from tests.fixtures.snapshots import NOW, TARGET
from tests.unit.detect.test_incidents import pooled

ONCALL = RoleFacts("oncall", superuser=False, signals=True, sees_all=True)
HOLDING = (HeldNow("app/42", 5),)


def session(**changes: object) -> SessionNow:
    now = SessionNow(
        backend_start=BACKEND_START,
        state="idle",
        usename="app",
        application_name="webhook-worker-1",
        client_addr="10.0.0.5",
        xact_seconds=None,
        state_seconds=330.0,
        same_role=False,
        superuser_session=False,
    )
    return replace(now, **changes)  # type: ignore[arg-type]


def look(
    now: SessionNow | None = None,
    role: RoleFacts = ONCALL,
    held: tuple[HeldNow, ...] = HOLDING,
) -> Look:
    return Look(role, "db:5432/app", session=now, held=held)


@pytest.mark.parametrize(
    ("seen", "role", "held", "verdict"),
    [
        (session(), ONCALL, HOLDING, Verdict.DONE),
        (None, ONCALL, (), Verdict.GONE),
        (
            session(backend_start=None, state=None),
            replace(ONCALL, sees_all=False),
            HOLDING,
            Verdict.HIDDEN,
        ),
        (session(backend_start=BACKEND_START + timedelta(seconds=3)), ONCALL, (), Verdict.REUSED),
        (session(), ONCALL, (HeldNow("app/7", 0),), Verdict.RELEASED),
        (session(), replace(ONCALL, signals=False), HOLDING, Verdict.DENIED),
        (session(same_role=True), replace(ONCALL, signals=False), HOLDING, Verdict.DONE),
        (session(superuser_session=True), ONCALL, HOLDING, Verdict.DENIED),
    ],
)
def test_each_look_gets_the_verdict_that_fits_it(
    seen: SessionNow | None, role: RoleFacts, held: tuple[HeldNow, ...], verdict: Verdict
) -> None:
    assert judge(incident(), ActionKind.TERMINATE, look(seen, role, held)).verdict is verdict


def test_a_role_that_cannot_see_backend_start_is_told_what_to_grant_not_that_the_pid_moved() -> (
    None
):
    said = judge(incident(), ActionKind.TERMINATE, look(session(backend_start=None)))
    assert said.verdict is Verdict.HIDDEN
    assert "GRANT pg_read_all_stats (or pg_monitor)" in said.detail
    assert "another session" not in said.detail


def test_cancel_refuses_an_idle_session_whose_locks_it_would_not_free() -> None:
    said = judge(incident(), ActionKind.CANCEL, look(session(state="idle in transaction")))
    assert said.verdict is Verdict.UNFIT
    assert (
        judge(incident(), ActionKind.CANCEL, look(session(state="active"))).verdict is Verdict.DONE
    )


def test_what_cannot_be_acted_on_is_refused_before_connecting() -> None:
    assert fits(resolved(incident()), ActionKind.TERMINATE).verdict is Verdict.RESOLVED  # type: ignore[union-attr]
    queue = IncidentRoot(RootKind.QUEUE, TARGET, queue="webhooks")
    assert fits(incident(root=queue), ActionKind.TERMINATE).verdict is Verdict.UNFIT  # type: ignore[union-attr]
    prepared = IncidentRoot(RootKind.PREPARED, TARGET, gid="job-7", database="app")
    assert fits(incident(root=prepared), ActionKind.TERMINATE).verdict is Verdict.UNFIT  # type: ignore[union-attr]
    assert fits(incident(root=prepared), ActionKind.ROLLBACK_PREPARED) is None
    assert fits(incident(), ActionKind.ROLLBACK_PREPARED).verdict is Verdict.UNFIT  # type: ignore[union-attr]
    assert fits(incident(), ActionKind.TERMINATE) is None


def test_a_prepared_transaction_given_the_same_gid_again_is_not_rolled_back() -> None:
    root = IncidentRoot(RootKind.PREPARED, TARGET, gid="job-7", database="app")
    base = incident(root=root)
    first = base.findings[0]
    assert isinstance(first.evidence, LockEvidence)
    seen = PreparedFacts("job-7", "app", "app", NOW, 762)
    holder = replace(first.evidence.holders[0], pid=0, prepared=seen)
    evidence = replace(first.evidence, holder_pid=0, holders=(holder,))
    prepared = replace(base, findings=(replace(first, evidence=evidence),))
    now = PreparedNow(xid=762, prepared=NOW, owner="oncall", database="app", owns=True)
    same = Look(ONCALL, "db", prepared=now, held=HOLDING)
    assert judge(prepared, ActionKind.ROLLBACK_PREPARED, same).verdict is Verdict.DONE
    later = replace(same, prepared=replace(now, xid=999))
    assert judge(prepared, ActionKind.ROLLBACK_PREPARED, later).verdict is Verdict.REUSED
    gone = replace(same, prepared=None)
    assert judge(prepared, ActionKind.ROLLBACK_PREPARED, gone).verdict is Verdict.GONE
    not_owner = replace(same, prepared=replace(now, owns=False))
    assert judge(prepared, ActionKind.ROLLBACK_PREPARED, not_owner).verdict is Verdict.DENIED


@pytest.mark.parametrize(
    ("state", "said"),
    [
        ("idle in transaction", "its open transaction (open 5m) is rolled back"),
        ("idle", "it has no open transaction: nothing is rolled back"),
        ("active", "its running statement is interrupted"),
    ],
)
def test_the_cost_follows_the_holder_s_state(state: str, said: str) -> None:
    now = session(state=state, xact_seconds=300.0 if state != "idle" else None)
    text = cost(incident(), ActionKind.TERMINATE, look(now))
    assert said in text
    assert "its 1 advisory lock(s) go free and the 5 session(s) waiting on them go on" in text


def test_a_pooled_backend_s_client_gets_an_error_only_when_one_is_linked() -> None:
    base = incident()
    root = replace(base.root, kind=RootKind.POOLED_BACKEND)
    linked = replace(base, root=root, findings=(pooled(base.findings[0], 40001),))
    assert "(10.0.0.9:40001 web) gets an error" in cost(
        linked, ActionKind.TERMINATE, look(session())
    )
    alone = replace(base, root=root)
    assert "no client sees an error" in cost(alone, ActionKind.TERMINATE, look(session()))

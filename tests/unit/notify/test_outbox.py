"""What a channel is told and when: one message per incident as it opens, gets
worse, lasts and resolves; ``for``, repeats and routes."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from lockwatch.model.findings import FindingKind, Severity
from lockwatch.model.incidents import Incident
from lockwatch.notify.message import Headline, Message
from lockwatch.notify.outbox import Announced, ChannelState, Pending, evaluate
from lockwatch.settings.notify import NotifySettings, Route, SlackChannel, TelegramChannel
from tests.fixtures.incident_values import incident, resolved, session_root
from tests.fixtures.notify import HOLDER_PID, convoy, finding
from tests.fixtures.snapshots import NOW, TARGET

CHANNELS = (
    TelegramChannel("ops", "1:token", "-100"),
    SlackChannel("team", "https://hooks.slack.com/services/T/B/x"),
)
EVERYTHING = NotifySettings(channels=CHANNELS)
ORPHAN = FindingKind.LOCK_ORPHANED


def later(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


class Channel:
    """One channel's view over time, told what is open after each poll."""

    def __init__(self, settings: NotifySettings = EVERYTHING, name: str = "ops") -> None:
        self.settings = settings
        self.name = name
        self.announced: dict[str, Announced] = {}
        self._ids = (f"m{n}" for n in itertools.count(1))

    def poll(
        self,
        active: Iterable[Incident],
        at: datetime = NOW,
        reported: Iterable[str] = (TARGET,),
        ended: Mapping[str, Incident] | None = None,
    ) -> list[Message]:
        self.announced, messages = evaluate(
            self.name,
            self.settings,
            self.announced,
            list(active),
            dict(ended or {}),
            set(reported),
            at,
            lambda: next(self._ids),
        )
        return messages


def told(messages: list[Message]) -> list[tuple[str, Headline]]:
    return [(m.notice.incident if m.notice else "", m.headline) for m in messages]


def test_a_new_incident_is_announced_at_the_first_poll_that_sees_it() -> None:
    channel = Channel()
    assert told(channel.poll([incident()])) == [("inc-1", Headline.OPENED)]


def test_a_session_holding_4001_locks_is_one_message() -> None:
    findings = [finding(lock=str(n), lasted=10) for n in range(203)]
    channel = Channel()
    (message,) = channel.poll([incident(findings, finding_count=203)])
    assert message.notice is not None
    assert (len(message.notice.findings), message.notice.more) == (5, 198)


def test_an_incident_is_held_back_until_a_finding_of_it_has_lasted_its_for() -> None:
    channel = Channel(NotifySettings(channels=CHANNELS, for_duration=60))
    young = incident([finding(lasted=0)])
    assert channel.poll([young]) == []
    assert channel.poll([young], later(59)) == []
    assert told(channel.poll([young], later(60))) == [("inc-1", Headline.OPENED)]


def test_an_incident_that_resolves_within_its_for_is_never_mentioned() -> None:
    channel = Channel(NotifySettings(channels=CHANNELS, for_duration=60))
    channel.poll([incident([finding()])])
    assert channel.poll([], later(30)) == []
    assert channel.announced == {}


def test_an_announced_incident_is_quiet_while_it_lasts_unchanged() -> None:
    channel = Channel()
    channel.poll([incident()])
    assert channel.poll([incident()], later(60)) == []


def test_a_new_finding_kind_joining_makes_one_worse_message() -> None:
    channel = Channel()
    holder = convoy()
    channel.poll([incident(holder[:1])])
    worse = incident([*holder[:1], finding(ORPHAN, "42")])
    (message,) = channel.poll([worse], later(10))
    assert (message.headline, message.notice is not None) == (Headline.WORSE, True)
    assert message.notice is not None
    assert [(f.kind, f.before) for f in message.notice.findings] == [
        (holder[0].kind.value, True),
        ("lock_orphaned", False),
    ]
    assert channel.poll([worse], later(20)) == []


def test_a_severity_rise_makes_a_worse_message_and_a_fall_does_not() -> None:
    channel = Channel()
    channel.poll([incident([finding()])])
    critical = incident([finding(severity=Severity.CRITICAL)])
    assert told(channel.poll([critical], later(10))) == [("inc-1", Headline.WORSE)]
    assert channel.poll([incident([finding()])], later(20)) == []


def test_a_resolved_incident_is_told_once_with_its_final_state() -> None:
    channel = Channel()
    opened = incident()
    channel.poll([opened])
    final = resolved(opened)
    (message,) = channel.poll([], later(60), ended={opened.id: final})
    assert message.headline is Headline.RESOLVED
    assert message.notice is not None and message.notice.resolution == "released"
    assert channel.poll([], later(70)) == []


def test_an_incident_gone_without_its_final_state_still_resolves_from_what_was_told() -> None:
    channel = Channel()
    channel.poll([incident()])
    (message,) = channel.poll([], later(60))
    assert message.headline is Headline.RESOLVED and message.notice is not None
    assert message.notice.resolution is None


def test_separate_incidents_are_separate_messages() -> None:
    channel = Channel()
    first = incident(id="a")
    second = incident([finding()], id="b", root=session_root(pid=HOLDER_PID + 1))
    assert sorted(told(channel.poll([first, second]))) == [
        ("a", Headline.OPENED),
        ("b", Headline.OPENED),
    ]


def test_a_reminder_goes_out_after_the_repeat_interval_and_not_before() -> None:
    channel = Channel(NotifySettings(channels=CHANNELS, repeat_interval=3600))
    channel.poll([incident()])
    assert channel.poll([incident()], later(3599)) == []
    assert told(channel.poll([incident()], later(3600))) == [("inc-1", Headline.REMINDER)]
    assert channel.poll([incident()], later(3700)) == []


def test_a_repeat_interval_of_zero_never_reminds() -> None:
    channel = Channel(NotifySettings(channels=CHANNELS, repeat_interval=0))
    channel.poll([incident()])
    assert channel.poll([incident()], later(10**6)) == []


def test_before_its_target_is_polled_an_announced_incident_neither_resolves_nor_is_forgotten() -> (
    None
):
    channel = Channel()
    channel.poll([incident()])
    assert channel.poll([], later(5), reported=()) == []
    assert len(channel.announced) == 1
    assert told(channel.poll([], later(10))) == [("inc-1", Headline.RESOLVED)]


def test_restored_announcements_keep_an_open_incident_from_being_announced_twice() -> None:
    first = Channel()
    first.poll([incident()])
    restarted = Channel()
    restarted.announced = ChannelState.load(ChannelState(first.announced).dump()).announced
    assert restarted.poll([incident()], later(60)) == []


def test_routes_pick_channels_by_the_kinds_severities_and_targets_of_its_findings() -> None:
    settings = NotifySettings(
        channels=CHANNELS,
        routes=(
            Route(("ops",), severities=frozenset({Severity.CRITICAL})),
            Route(("team",), kinds=frozenset({ORPHAN}), targets=("billing-*",)),
        ),
    )
    billing = incident([finding(target="billing-eu")])
    mixed = incident([finding(FindingKind.LOCK_CONVOY), finding(severity=Severity.CRITICAL)])
    assert told(Channel(settings, "team").poll([billing], reported=("billing-eu",))) == [
        ("inc-1", Headline.OPENED)
    ]
    assert Channel(settings, "ops").poll([billing], reported=("billing-eu",)) == []
    assert told(Channel(settings, "ops").poll([mixed])) == [("inc-1", Headline.OPENED)]
    assert Channel(settings, "team").poll([mixed]) == []


def test_the_earliest_for_of_the_routes_its_findings_match_wins() -> None:
    settings = NotifySettings(
        channels=CHANNELS,
        for_duration=300,
        routes=(
            Route(("ops",)),
            Route(("ops",), severities=frozenset({Severity.CRITICAL}), for_duration=0),
        ),
    )
    quiet = incident([finding()])
    urgent = incident([finding(), finding(FindingKind.LOCK_CONVOY, severity=Severity.CRITICAL)])
    assert Channel(settings).poll([quiet]) == []
    assert told(Channel(settings).poll([urgent])) == [("inc-1", Headline.OPENED)]


def test_an_incident_no_longer_routed_here_is_dropped_without_a_word() -> None:
    critical_only = NotifySettings(
        channels=CHANNELS, routes=(Route(("ops",), severities=frozenset({Severity.CRITICAL})),)
    )
    channel = Channel(critical_only)
    channel.poll([incident([finding(severity=Severity.CRITICAL)])])
    assert channel.poll([incident([finding()])], later(10)) == []
    assert channel.announced == {}


def test_channel_state_round_trips_and_skips_what_it_cannot_read() -> None:
    channel = Channel()
    (message,) = channel.poll([incident()])
    state = ChannelState(channel.announced, [Pending(message, later(5), attempts=2)])
    document = state.dump()
    document["announced"].append({"finding": {"kind": "lock_convoy"}, "sent_at": "x"})
    document["outbox"].append({"message": {"entries": []}, "next_attempt": "nope"})
    restored = ChannelState.load(document)
    assert restored.announced == channel.announced
    assert restored.outbox == [Pending(message, later(5), attempts=2)]
    assert ChannelState.load({"announced": "garbage", "outbox": None}) == ChannelState()


def test_an_incident_keeps_its_message_key_while_its_findings_change() -> None:
    channel = Channel()
    channel.poll([incident()])
    reshuffled = replace(incident(), findings=tuple(reversed(incident().findings)))
    assert channel.poll([reshuffled], later(10)) == []
    assert list(channel.announced) == [incident().fingerprint]


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.dictionaries(st.sampled_from(["a", "b", "c"]), st.sampled_from(list(Severity))),
        max_size=12,
    )
)
def test_every_incident_is_told_opened_then_at_most_worse_or_reminded_then_resolved_once(
    polls: list[dict[str, Severity]],
) -> None:
    channel = Channel(NotifySettings(channels=CHANNELS, repeat_interval=60))
    story: dict[str, list[Headline]] = {}
    for n, open_now in enumerate([*polls, {}]):
        at = later(45 * n)
        active = [
            incident(
                [finding(severity=severity)],
                id=key,
                severity=severity,
                root=session_root(pid=ord(key)),  # one root per incident, as on a target
            )
            for key, severity in open_now.items()
        ]
        for message in channel.poll(active, at):
            assert message.notice is not None
            story.setdefault(message.notice.incident, []).append(message.headline)
    for key, headlines in story.items():
        # one or more spans of OPENED (WORSE | REMINDER)* RESOLVED, the last one closed
        assert headlines[0] is Headline.OPENED and headlines[-1] is Headline.RESOLVED, headlines
        for before, after in itertools.pairwise(headlines):
            assert (before is Headline.RESOLVED) == (after is Headline.OPENED), (key, headlines)
    assert channel.announced == {}


def test_a_replica_taking_over_knows_an_incident_another_replica_announced_under_another_id() -> (
    None
):
    announced_there = incident(id="a-1")
    old_sender = Channel()
    old_sender.poll([announced_there])
    new_sender = Channel()
    shared = ChannelState.load(ChannelState(old_sender.announced).dump())
    new_sender.announced = shared.announced
    # The same root, which this replica saw open a poll later under its own id.
    seen_here = replace(
        announced_there,
        id="b-1",
        opened_at=announced_there.opened_at + timedelta(milliseconds=480),
    )
    assert new_sender.poll([seen_here], later(30)) == []
    (message,) = new_sender.poll([], later(60), ended={"b-1": resolved(seen_here)})
    assert message.headline is Headline.RESOLVED and message.notice is not None
    # Told under the id (and start) the channel first heard, with this replica's final state.
    assert (message.notice.incident, message.notice.opened_at) == (
        "a-1",
        announced_there.opened_at,
    )
    assert message.notice.resolution == "released"


def test_a_root_with_a_new_incident_after_the_told_one_resolved_gets_both_messages() -> None:
    channel = Channel()
    first = incident(id="inc-1")
    channel.poll([first])
    again = incident(id="inc-2", opened_at=later(20))
    messages = channel.poll([again], later(20), ended={"inc-1": resolved(first, after=10)})
    assert told(messages) == [("inc-1", Headline.RESOLVED), ("inc-2", Headline.OPENED)]
    assert channel.poll([again], later(30)) == []

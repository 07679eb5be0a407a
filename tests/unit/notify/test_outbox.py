"""What a channel is told and when: ``for``, repeats, resolutions, groups, routes."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from lockwatch.model.findings import Finding, FindingKind, Related, Severity, Subject
from lockwatch.notify.message import EntryState, Message
from lockwatch.notify.outbox import Announced, ChannelState, Pending, evaluate, finding_key
from lockwatch.settings.notify import NotifySettings, Route, SlackChannel, TelegramChannel
from lockwatch.state.ledger import dump_finding, load_finding
from tests.fixtures.notify import convoy, finding
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
    """One channel's view over time, told what is active after each poll."""

    def __init__(self, settings: NotifySettings = EVERYTHING, name: str = "ops") -> None:
        self.settings = settings
        self.name = name
        self.announced: dict[str, Announced] = {}
        self._ids = (f"m{n}" for n in itertools.count(1))

    def poll(
        self, active: Iterable[Finding], at: datetime = NOW, reported: Iterable[str] = (TARGET,)
    ) -> list[Message]:
        self.announced, messages = evaluate(
            self.name,
            self.settings,
            self.announced,
            list(active),
            set(reported),
            at,
            lambda: next(self._ids),
        )
        return messages


def states(message: Message) -> list[tuple[str, EntryState]]:
    return [(entry.finding.kind.value, entry.state) for entry in message.entries]


def test_a_new_finding_is_announced_at_the_first_poll_that_sees_it() -> None:
    channel = Channel()
    (message,) = channel.poll([finding()])
    assert states(message) == [("lock_orphaned", EntryState.NEW)]
    assert message.channel == "ops" and message.created_at == NOW


def test_a_finding_is_held_back_until_it_has_lasted_its_for_duration() -> None:
    channel = Channel(NotifySettings(channels=CHANNELS, for_duration=60))
    orphan = finding(lasted=10)
    assert channel.poll([orphan]) == []
    assert channel.poll([orphan], later(49)) == []
    (message,) = channel.poll([orphan], later(50))
    assert states(message) == [("lock_orphaned", EntryState.NEW)]


def test_the_for_duration_counts_from_since_so_an_old_problem_fires_at_first_sight() -> None:
    channel = Channel(NotifySettings(channels=CHANNELS, for_duration=60))
    assert len(channel.poll([finding(lasted=300)])) == 1


def test_a_finding_that_clears_within_its_for_duration_is_never_mentioned() -> None:
    channel = Channel(NotifySettings(channels=CHANNELS, for_duration=60))
    assert channel.poll([finding()]) == []
    assert channel.poll([], later(30)) == []
    assert channel.announced == {}


def test_an_announced_finding_is_not_announced_again_while_it_lasts() -> None:
    channel = Channel()
    channel.poll([finding()])
    for seconds in (10, 20, 600):
        assert channel.poll([finding()], later(seconds)) == []


def test_related_findings_on_one_lock_go_out_as_one_message() -> None:
    channel = Channel()
    (message,) = channel.poll(convoy())
    # the convoy is critical and older, so it leads
    assert states(message) == [
        ("lock_convoy", EntryState.NEW),
        ("lock_held_too_long", EntryState.NEW),
    ]


def test_a_relation_to_a_subject_on_another_target_names_that_target() -> None:
    stalled = finding(
        FindingKind.QUEUE_STALLED,
        None,
        subject=Subject(queue="q"),
        related=(Related(FindingKind.LOCK_CONVOY, "other", Subject("app", "42")),),
    )
    assert [len(m.entries) for m in Channel().poll([*convoy(), stalled])] == [2, 1]
    assert [len(m.entries) for m in Channel().poll([*convoy(target="other"), stalled])] == [3]


def test_findings_on_different_locks_go_out_as_separate_messages() -> None:
    channel = Channel()
    messages = channel.poll([*convoy(), finding(lock="7,13")])
    assert [len(m.entries) for m in messages] == [2, 1]


def test_a_stalled_queue_related_to_its_lock_joins_the_lock_message() -> None:
    stalled = finding(
        FindingKind.QUEUE_STALLED,
        None,
        subject=Subject(queue="webhook_jobs"),
        severity=Severity.CRITICAL,
        related=(
            Related(FindingKind.QUEUE_GROWING, TARGET, Subject(queue="webhook_jobs")),
            Related(FindingKind.LOCK_CONVOY, TARGET, Subject("app", "42")),
        ),
    )
    channel = Channel()
    (message,) = channel.poll([*convoy(), stalled])
    assert sorted(kind for kind, _ in states(message)) == [
        "lock_convoy",
        "lock_held_too_long",
        "queue_stalled",
    ]


def test_malformed_relations_are_ignored_rather_than_grouping_anything() -> None:
    saved = dump_finding(finding(FindingKind.QUEUE_STALLED, None, subject=Subject(queue="q")))
    saved["evidence"]["related"] = [  # type: ignore[index,call-overload]
        "lock_convoy",
        {"subject": "app/42"},
        {"subject": {"colour": 1}},
    ]
    odd = load_finding(saved)
    assert odd is not None and odd.related == ()
    assert [len(m.entries) for m in Channel().poll([*convoy(), odd])] == [2, 1]


def test_a_later_finding_in_a_group_comes_with_what_is_already_firing() -> None:
    channel = Channel()
    channel.poll(convoy())
    orphan = finding(ORPHAN, "42", severity=Severity.CRITICAL)
    (message,) = channel.poll([*convoy(later(5)), orphan], later(5))
    assert message.headline is EntryState.NEW
    assert states(message)[0] == ("lock_orphaned", EntryState.NEW)
    assert {s for _, s in states(message)[1:]} == {EntryState.FIRING}


def test_a_cleared_finding_is_resolved_once() -> None:
    channel = Channel()
    channel.poll([finding()])
    (message,) = channel.poll([], later(30))
    assert states(message) == [("lock_orphaned", EntryState.RESOLVED)]
    assert message.headline is EntryState.RESOLVED and not message.firing
    assert channel.poll([], later(60)) == []


def test_a_resolution_in_a_group_tells_what_is_still_firing() -> None:
    channel = Channel()
    channel.poll(convoy())
    held_only = [f for f in convoy(later(10)) if f.kind is FindingKind.LOCK_HELD_TOO_LONG]
    (message,) = channel.poll(held_only, later(10))
    assert message.headline is EntryState.RESOLVED and message.firing
    assert states(message) == [
        ("lock_convoy", EntryState.RESOLVED),
        ("lock_held_too_long", EntryState.FIRING),
    ]


def test_a_reminder_goes_out_after_the_repeat_interval_and_not_before() -> None:
    channel = Channel(NotifySettings(channels=CHANNELS, repeat_interval=3600))
    channel.poll(convoy())
    assert channel.poll(convoy(later(3599)), later(3599)) == []
    (reminder,) = channel.poll(convoy(later(3600)), later(3600))
    assert reminder.headline is EntryState.FIRING
    assert {s for _, s in states(reminder)} == {EntryState.FIRING}
    assert channel.poll(convoy(later(3700)), later(3700)) == []


def test_a_repeat_interval_of_zero_never_reminds() -> None:
    channel = Channel(NotifySettings(channels=CHANNELS, repeat_interval=0))
    channel.poll([finding()])
    assert channel.poll([finding()], later(30 * 86400)) == []


def test_before_its_target_is_polled_an_announced_finding_neither_resolves_nor_is_forgotten() -> (
    None
):
    channel = Channel()
    channel.poll([finding()])
    assert channel.poll([], later(5), reported=()) == []
    assert len(channel.announced) == 1
    (resolved,) = channel.poll([], later(10))
    assert resolved.headline is EntryState.RESOLVED


def test_restored_announcements_keep_a_firing_finding_from_being_announced_twice() -> None:
    first = Channel()
    first.poll(convoy())
    restarted = Channel()
    restarted.announced = ChannelState.load(ChannelState(first.announced).dump()).announced
    assert restarted.poll(convoy(later(60)), later(60)) == []


def test_routes_pick_channels_by_kind_severity_and_target() -> None:
    settings = NotifySettings(
        channels=CHANNELS,
        routes=(
            Route(("ops",), severities=frozenset({Severity.CRITICAL})),
            Route(("team",), kinds=frozenset({ORPHAN}), targets=("billing-*",)),
        ),
    )
    critical = finding(severity=Severity.CRITICAL)
    billing_orphan = finding(target="billing-eu")
    other_orphan = finding(target="main")
    assert settings.timing(critical, "ops") is not None
    assert settings.timing(critical, "team") is None
    assert settings.timing(billing_orphan, "team") is not None
    assert settings.timing(billing_orphan, "ops") is None
    assert settings.timing(other_orphan, "team") is None


def test_without_routes_every_channel_hears_of_everything() -> None:
    for kind in FindingKind:
        for name in ("ops", "team"):
            assert EVERYTHING.timing(finding(kind), name) is not None


def test_the_shortest_for_and_repeat_of_the_routes_that_match_win() -> None:
    settings = NotifySettings(
        channels=CHANNELS,
        for_duration=300,
        repeat_interval=7200,
        routes=(
            Route(("ops",)),
            Route(("ops",), severities=frozenset({Severity.CRITICAL}), for_duration=0),
            Route(("ops",), kinds=frozenset({ORPHAN}), repeat_interval=0),
        ),
    )
    critical = settings.timing(finding(severity=Severity.CRITICAL), "ops")
    warning = settings.timing(finding(FindingKind.LOCK_CONVOY), "ops")
    assert critical is not None and (critical.for_duration, critical.repeat_interval) == (0, 7200)
    assert warning is not None and (warning.for_duration, warning.repeat_interval) == (300, 7200)


def test_a_finding_no_longer_routed_here_is_dropped_without_a_word() -> None:
    critical_only = NotifySettings(
        channels=CHANNELS, routes=(Route(("ops",), severities=frozenset({Severity.CRITICAL})),)
    )
    channel = Channel(critical_only)
    channel.poll([finding(severity=Severity.CRITICAL)])
    assert channel.poll([finding(severity=Severity.WARNING)], later(10)) == []
    assert channel.announced == {}


def test_channel_state_round_trips_and_skips_what_it_cannot_read() -> None:
    channel = Channel()
    (message,) = channel.poll(convoy())
    state = ChannelState(channel.announced, [Pending(message, later(5), attempts=2)])
    document = state.dump()
    document["announced"].append({"finding": {"kind": "no_such_kind"}, "sent_at": "x"})
    document["outbox"].append({"message": {"entries": []}, "next_attempt": "nope"})
    restored = ChannelState.load(document)
    assert restored.announced.keys() == channel.announced.keys()
    assert restored.outbox == [Pending(message, later(5), attempts=2)]
    assert ChannelState.load({"announced": "garbage", "outbox": None}) == ChannelState()


def test_finding_keys_ignore_subject_parts_that_are_not_set() -> None:
    plain = finding(lock="42")
    spelled_out = finding(lock="42", subject=Subject("app", "42", None))
    keys: Mapping[str, int] = {finding_key(plain): 1, finding_key(spelled_out): 2}
    assert len(keys) == 1

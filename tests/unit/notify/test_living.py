"""One living message per incident: when a living channel edits, replies or
posts anew (pure ``evaluate`` and the outbox), and how the edits and replies
reach a Telegram and a Slack Web API stand-in that keep messages by id."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from pydantic import TypeAdapter

from lockwatch.model.findings import FindingKind, Severity
from lockwatch.model.incidents import Incident
from lockwatch.notify.living import Thread, deliver, edits
from lockwatch.notify.message import Headline, Message, Notice
from lockwatch.notify.outbox import ChannelState, due
from lockwatch.notify.render import document, plain, reply_lines
from lockwatch.notify.slack_api import SlackApiTransport, make_transport
from lockwatch.notify.transports import EditingTransport, TelegramTransport, TransportError
from lockwatch.settings.notify import (
    NotifySettings,
    Route,
    SlackApiChannel,
    SlackChannel,
    TelegramChannel,
)
from tests.fixtures.incident_values import incident, resolved
from tests.fixtures.notify import finding
from tests.fixtures.snapshots import NOW
from tests.fixtures.standins import ChatStandin, Reply, telegram_flood
from tests.unit.notify.test_outbox import Channel, later, told

LIVING = NotifySettings(
    channels=(
        TelegramChannel("ops", "1:token", "-100", living=True),
        SlackChannel("team", "https://hooks.slack.com/services/T/B/x"),
    ),
    edit_interval=60,
)


def grown(waiters: int, severity: Severity = Severity.WARNING) -> Incident:
    """The incident as it grows: its title says how many wait."""
    started = incident([finding(severity=severity)])
    return replace(started, title=f"pid 1234 holds lock 42, {waiters} waiting", waiters=waiters)


# -- what is decided ------------------------------------------------------------


def test_a_living_channel_edits_as_the_incident_grows_at_most_every_edit_interval() -> None:
    channel = Channel(LIVING, "ops")
    assert told(channel.poll([grown(5)])) == [("inc-1", Headline.OPENED)]
    assert channel.poll([grown(6)], later(30)) == []  # grew, but edited a minute apart at most
    assert told(channel.poll([grown(7)], later(61))) == [("inc-1", Headline.UPDATED)]
    assert channel.poll([grown(7)], later(200)) == []  # unchanged: nothing to edit
    critical = grown(7, Severity.CRITICAL)
    assert told(channel.poll([critical], later(210))) == [("inc-1", Headline.WORSE)]


def test_on_a_living_channel_a_kind_joining_is_an_edit_and_a_severity_rise_a_reply() -> None:
    channel = Channel(LIVING, "ops")
    channel.poll([incident([finding(lock="7,13")])])
    joined = incident([finding(lock="7,13"), finding(FindingKind.LOCK_HELD_TOO_LONG, "7,13")])
    assert told(channel.poll([joined], later(5))) == [("inc-1", Headline.UPDATED)]
    webhook = Channel(LIVING, "team")  # one message per change: a kind joining is worse
    webhook.poll([incident([finding(lock="7,13")])])
    assert told(webhook.poll([joined], later(5))) == [("inc-1", Headline.WORSE)]


def test_a_channel_that_cannot_edit_is_never_told_the_incident_grew() -> None:
    channel = Channel(LIVING, "team")  # an incoming webhook
    channel.poll([grown(5)])
    assert channel.poll([grown(9)], later(600)) == []


def test_a_route_can_ask_for_n_openings_within_a_window_before_it_tells() -> None:
    flapping = Route(("ops",), times=3, within=3600)
    settings = replace(LIVING, routes=(flapping,))
    once = incident()
    assert due(settings, once, "ops") is None
    twice = replace(once, reopened=(NOW + timedelta(minutes=5),))
    assert due(settings, twice, "ops") is None
    thrice = replace(once, reopened=(NOW + timedelta(minutes=5), NOW + timedelta(minutes=9)))
    assert due(settings, thrice, "ops") is not None
    spread = replace(once, reopened=(NOW + timedelta(hours=2), NOW + timedelta(hours=4)))
    assert due(settings, spread, "ops") is None  # three times, but not within an hour
    # A route without times tells at once, whatever another one asks.
    both = replace(settings, routes=(flapping, Route(("ops",))))
    assert due(both, once, "ops") is not None


def test_a_flapping_only_route_tells_the_second_opening_and_then_as_usual() -> None:
    channel = Channel(replace(LIVING, routes=(Route(("ops",), times=2, within=3600),)), "ops")
    first = grown(5)
    assert channel.poll([first]) == []
    assert channel.poll([], later(60), ended={first.id: resolved(first)}) == []  # never told
    back = replace(first, reopened=(later(120),))
    assert told(channel.poll([back], later(120))) == [("inc-1", Headline.OPENED)]
    assert told(channel.poll([], later(180), ended={back.id: resolved(back)})) == [
        ("inc-1", Headline.RESOLVED)
    ]


def test_times_without_within_is_refused() -> None:
    with pytest.raises(ValueError, match="times needs within"):
        TypeAdapter(Route).validate_python({"channels": ["ops"], "times": 3})


def message(headline: Headline, inc: Incident | None = None, at: datetime = NOW) -> Message:
    return Message(
        f"m-{headline}-{at.timestamp()}", "ops", at, Notice.of(inc or incident()), headline
    )


def test_behind_a_rate_limit_the_outbox_keeps_one_edit_per_incident() -> None:
    state = ChannelState()
    state.queue([message(Headline.OPENED)], NOW, living=True)
    state.queue([message(Headline.UPDATED, at=later(60))], NOW, living=True)
    state.queue([message(Headline.UPDATED, at=later(120))], NOW, living=True)
    state.queue([message(Headline.WORSE, at=later(180))], NOW, living=True)
    assert [p.message.headline for p in state.outbox] == [Headline.OPENED, Headline.WORSE]
    kept = ChannelState()
    kept.queue([message(Headline.UPDATED), message(Headline.UPDATED)], NOW, living=False)
    assert len(kept.outbox) == 2


def test_where_each_message_is_outlives_the_state_s_json() -> None:
    state = ChannelState()
    state.threads["root"] = Thread("root", "17", "inc-1", NOW, later(5))
    again = ChannelState.load(state.dump())
    assert again.threads == state.threads


def test_the_living_text_is_headed_by_the_state_and_says_how_often_it_opened() -> None:
    flapped = replace(incident(), reopened=(later(300), later(900)))
    text = plain(document(message(Headline.UPDATED, flapped, later(3000)), living=True))
    assert text.startswith("🔥 OPEN: pid")
    assert "🔁 opened 3 times in 55m" in text.splitlines()[2]
    final = resolved(flapped)
    ended = plain(document(message(Headline.RESOLVED, final, later(3100)), living=True))
    assert ended.startswith("✅ RESOLVED: ")
    assert "resolved (released) after" in ended
    (reply,) = reply_lines(message(Headline.RESOLVED, final, later(3100)))
    assert "".join(span.text for span in reply).startswith("✅ resolved (released) after ")


# -- what reaches the stand-ins -------------------------------------------------


@pytest.fixture
def chat() -> Iterator[ChatStandin]:
    with ChatStandin() as server:
        yield server


def transports(chat: ChatStandin) -> list[EditingTransport]:
    channels = (
        TelegramChannel("ops", chat.token, chat.chat_id, chat.telegram_api, living=True),
        SlackApiChannel("team", chat.slack_token, chat.slack_channel, chat.slack_api),
    )
    settings = NotifySettings(channels=channels, connect_timeout=2, read_timeout=2)
    made = [make_transport(channel, settings) for channel in channels]
    living = [edits(transport) for transport in made]
    assert all(transport is not None for transport in living)
    return [transport for transport in living if transport is not None]


@pytest.mark.parametrize("service", ["telegram", "slack_api"])
def test_one_message_grows_worsens_flaps_and_resolves_in_place(
    chat: ChatStandin, service: str
) -> None:
    transport = next(t for t in transports(chat) if _service(t) == service)
    threads: dict[str, Thread] = {}
    deliver(transport, message(Headline.OPENED, grown(5)), threads, NOW)
    deliver(transport, message(Headline.UPDATED, grown(7), later(60)), threads, later(60))
    worse = grown(7, Severity.CRITICAL)
    deliver(transport, message(Headline.WORSE, worse, later(120)), threads, later(120))
    deliver(transport, message(Headline.RESOLVED, resolved(worse), later(180)), threads, later(180))
    # back within the grace: the book reopened the same incident
    back = replace(worse, reopened=(later(240),))
    deliver(transport, message(Headline.OPENED, back, later(240)), threads, later(240))
    deliver(transport, message(Headline.RESOLVED, resolved(back), later(300)), threads, later(300))

    (kept,) = chat.kept(service).values()
    assert kept.edits == 5
    assert "✅ RESOLVED: " in kept.text.splitlines()[0]
    assert "🔁 opened 2 times in 5m" in kept.text.splitlines()[2]
    assert [reply.split(" ")[0].strip("*") for reply in kept.replies] == ["⬆️", "✅", "🔁", "✅"]


def test_the_message_counts_every_opening_it_told_though_a_replica_missed_one(
    chat: ChatStandin,
) -> None:
    (telegram, _) = transports(chat)
    threads: dict[str, Thread] = {}
    first = grown(5)
    deliver(telegram, message(Headline.OPENED, first), threads, NOW)
    deliver(telegram, message(Headline.RESOLVED, resolved(first), later(60)), threads, later(60))
    back = replace(first, reopened=(later(120),))
    deliver(telegram, message(Headline.OPENED, back, later(120)), threads, later(120))
    # The next sender's book never saw that flap: its incident opened once.
    deliver(telegram, message(Headline.UPDATED, grown(6), later(180)), threads, later(180))
    (kept,) = chat.kept("telegram").values()
    assert "opened 2 times in " in kept.text
    deliver(
        telegram, message(Headline.RESOLVED, resolved(grown(6)), later(240)), threads, later(240)
    )
    again = replace(grown(6), reopened=(later(300),))  # its own second opening
    deliver(telegram, message(Headline.OPENED, again, later(300)), threads, later(300))
    (kept,) = chat.kept("telegram").values()
    assert "opened 3 times in " in kept.text
    assert threads[first.fingerprint].openings == 3


@pytest.mark.parametrize("service", ["telegram", "slack_api"])
def test_a_message_deleted_by_someone_is_posted_anew_once(chat: ChatStandin, service: str) -> None:
    transport = next(t for t in transports(chat) if _service(t) == service)
    threads: dict[str, Thread] = {}
    deliver(transport, message(Headline.OPENED), threads, NOW)
    (gone,) = chat.kept(service)
    chat.forget(service, gone)
    said = deliver(transport, message(Headline.UPDATED, grown(8), later(60)), threads, later(60))
    assert "cannot be edited any more" in said
    (anew,) = chat.kept(service)
    assert anew != gone and threads[incident().fingerprint].ref == anew
    deliver(transport, message(Headline.UPDATED, grown(9), later(120)), threads, later(120))
    assert list(chat.kept(service)) == [anew] and chat.kept(service)[anew].edits == 1


def test_an_edit_sent_twice_by_a_retry_counts_as_done(chat: ChatStandin) -> None:
    telegram = next(t for t in transports(chat) if isinstance(t, TelegramTransport))
    threads: dict[str, Thread] = {}
    deliver(telegram, message(Headline.OPENED), threads, NOW)
    update = message(Headline.UPDATED, grown(8), later(60))
    deliver(telegram, update, threads, later(60))
    deliver(telegram, update, threads, later(60))  # "message is not modified"
    (kept,) = chat.kept("telegram").values()
    assert kept.edits == 1


def test_slack_s_rate_limit_and_its_refusals_are_told_apart(chat: ChatStandin) -> None:
    slack = next(t for t in transports(chat) if isinstance(t, SlackApiTransport))
    chat.reply(Reply(429, b"", {"Retry-After": "7"}), service="slack_api")
    with pytest.raises(TransportError) as limited:
        slack.open(message(Headline.OPENED))
    assert limited.value.retry_after == 7.0 and not limited.value.permanent
    wrong = SlackApiTransport(
        replace(slack.channel, bot_token="xoxb-wrong"), connect_timeout=2, read_timeout=2
    )
    with pytest.raises(TransportError) as refused:
        wrong.open(message(Headline.OPENED))
    assert refused.value.permanent and "invalid_auth; check bot_token" in str(refused.value)
    assert "xoxb-wrong" not in str(refused.value)


def _service(transport: EditingTransport) -> str:
    return "telegram" if isinstance(transport, TelegramTransport) else "slack_api"


def test_a_telegram_flood_on_an_edit_carries_its_retry_after(chat: ChatStandin) -> None:
    (telegram, _) = transports(chat)
    threads: dict[str, Thread] = {}
    deliver(telegram, message(Headline.OPENED), threads, NOW)
    chat.reply(telegram_flood(retry_after=9), service="telegram")
    with pytest.raises(TransportError) as limited:
        deliver(telegram, message(Headline.UPDATED, grown(8), later(60)), threads, later(60))
    assert limited.value.retry_after == 9.0 and not limited.value.gone


def test_notify_test_posts_a_plain_message_through_a_living_channel(chat: ChatStandin) -> None:
    for transport in transports(chat):
        said = transport.send(Message("t", "team", NOW))
        assert said.startswith(("HTTP 200, message", "message "))
    assert [k.text.lstrip("*").split()[1] for k in chat.kept("slack_api").values()] == ["lockwatch"]
    assert len(chat.kept("telegram")) == 1


def test_a_message_kept_by_another_kind_of_channel_under_the_name_is_posted_anew(
    chat: ChatStandin,
) -> None:
    (telegram, _) = transports(chat)
    key = incident().fingerprint
    threads = {key: Thread(key, "1700000000.000001", "inc-1", NOW)}  # a Slack ts
    said = deliver(telegram, message(Headline.UPDATED, at=later(60)), threads, later(60))
    assert "is not a Telegram message id" in said
    (posted,) = chat.kept("telegram")
    assert threads[key].ref == posted

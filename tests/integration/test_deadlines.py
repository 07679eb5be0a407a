"""Every outbound HTTP call ends at its total deadline, even against a receiver
that trickles its answer a byte at a time (each read well within its timeout):
a webhook channel's and the Prometheus CPU source's."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from lockwatch.notify.message import Message
from lockwatch.notify.transports import TransportError, WebhookTransport
from lockwatch.sample.base import SampleContext, SampleError
from lockwatch.sample.workers import PrometheusCpuSampler
from lockwatch.settings.notify import WebhookChannel
from lockwatch.settings.queues import PrometheusCpu
from tests.fixtures.postgres import wait_until
from tests.fixtures.trickle import Trickler

PAUSE = 0.05  # seconds between two bytes of the answer


def test_a_webhook_call_to_a_trickling_receiver_ends_at_its_deadline() -> None:
    with Trickler(PAUSE) as trickler:
        transport = WebhookTransport(
            WebhookChannel("hooks", f"{trickler.url}/hook"),
            connect_timeout=1.0,
            read_timeout=1.0,
            deadline=1.5,
        )
        with pytest.raises(TransportError) as error:
            transport.send(Message("t", "hooks", datetime.now(UTC)))  # notify-test's
        wait_until(lambda: trickler.calls and trickler.calls[0].ended.is_set(), message="ended")
    assert error.value.unanswered, "the request went out whole: it may have been delivered"
    assert "did not answer whole within 1.5s" in str(error.value)
    call = trickler.calls[0]
    assert b"POST /hook" in call.request
    assert call.closed_by_client and call.sent < len(trickler.answer), call.sent


def test_the_deadline_defaults_to_the_connect_and_read_timeouts_added_up() -> None:
    channel = WebhookChannel("hooks", "http://127.0.0.1:1/hook")
    assert WebhookTransport(channel, connect_timeout=3.0, read_timeout=10.0).deadline == 13.0


def test_a_trickling_prometheus_answer_fails_the_reading_at_its_timeout() -> None:
    with Trickler(PAUSE) as trickler:
        sampler = PrometheusCpuSampler(PrometheusCpu(trickler.url, "up", timeout=1.0))
        with pytest.raises(SampleError, match=r"prometheus: no whole answer within 1s"):
            sampler.sample(SampleContext(datetime.now(UTC), None))
        wait_until(lambda: trickler.calls and trickler.calls[0].ended.is_set(), message="ended")
    assert trickler.calls[0].closed_by_client

"""Queue depth from Redis: list, sorted-set and stream lengths, and the layouts
of the queue libraries (``sample/presets``), through redis-py with connect and
read timeouts.

Redis drops a list when its last item goes, so a missing list or sorted set
is an empty queue, not an error.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from lockwatch.model.queues import QueueSample
from lockwatch.sample.base import SampleContext, SampleError
from lockwatch.sample.presets.base import age_seconds, text
from lockwatch.sample.presets.registry import redis_reader
from lockwatch.settings.queues import Queue, RedisQueueSource, RedisType
from lockwatch.util.secrets import first_line, redact

# Undelivered stream entries counted one by one when Redis cannot tell the lag.
STREAM_SCAN_LIMIT = 10_000


def _stream_id_time(entry_id: bytes | str | None) -> datetime | None:
    """The wall time an entry was added: its id's milliseconds part.

    >>> _stream_id_time(b"1700000000000-3")
    datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.timezone.utc)
    """
    written = text(entry_id)
    if not written or "-" not in written:
        return None
    millis = written.split("-", 1)[0]
    if not millis.isdigit():
        return None
    return datetime.fromtimestamp(int(millis) / 1000, UTC)


class RedisQueueSampler:
    """One queue in Redis. Not thread-safe; one per queue entry."""

    def __init__(self, queue: Queue) -> None:
        assert isinstance(queue.source, RedisQueueSource)
        self.queue = queue
        self.spec = queue.source
        self._secrets = (self.spec.url,)
        self._client: redis.Redis | None = None
        # A library's layout is read by its preset; plain keys here.
        self._layout = redis_reader(self.spec.layout)

    def _connect(self) -> redis.Redis:
        if self._client is None:
            self._client = redis.Redis.from_url(
                self.spec.url,
                socket_connect_timeout=self.spec.timeout,
                socket_timeout=self.spec.timeout,
                # The source runner retries with its own backoff; a retry here
                # would multiply the time a dead server costs each poll.
                retry=Retry(NoBackoff(), 0),
                client_name="lockwatch",
            )
        return self._client

    def sample(self, context: SampleContext) -> dict[str, QueueSample]:
        try:
            return {self.queue.name: self._read(self._connect(), context.now)}
        except redis.ResponseError as exc:
            raise SampleError(self._explain(exc)) from None
        except redis.RedisError as exc:
            self.close()
            raise SampleError(self._explain(exc)) from None

    def _explain(self, exc: redis.RedisError) -> str:
        detail = first_line(exc)
        if "WRONGTYPE" in detail:
            keys = ", ".join(self.spec.keys)
            detail = f"a key of {keys} holds another type than {self.spec.type.value}"
        return redact(f"queue {self.queue.name}: redis: {detail}", self._secrets)

    def _read(self, client: redis.Redis, now: datetime) -> QueueSample:
        if self._layout is not None:
            (name,) = self.spec.keys
            return self._layout(client, name, now)
        if self.spec.type is RedisType.STREAM:
            return self._stream(client, now)
        pipe = client.pipeline(transaction=False)
        for key in self.spec.keys:
            if self.spec.type is RedisType.LIST:
                pipe.llen(key)
            else:
                pipe.zcard(key)
        return QueueSample(now, sum(int(n) for n in pipe.execute()))

    def _stream(self, client: redis.Redis, now: datetime) -> QueueSample:
        (key,) = self.spec.keys
        group = self.spec.group
        if group is None:
            return QueueSample(now, int(client.xlen(key)))
        if not client.exists(key):
            raise SampleError(f"queue {self.queue.name}: no stream {key!r}")
        groups: list[dict[str, Any]] = client.xinfo_groups(key)
        info = next((g for g in groups if text(g.get("name")) == group), None)
        if info is None:
            names = ", ".join(sorted(text(g.get("name")) or "?" for g in groups)) or "none"
            raise SampleError(
                f"queue {self.queue.name}: stream {key!r} has no consumer group {group!r} "
                f"(groups: {names})"
            )
        pending = int(info.get("pending") or 0)
        last_delivered = text(info.get("last-delivered-id")) or "0-0"
        lag = info.get("lag")
        undelivered = client.xrange(key, min=f"({last_delivered}", count=1)
        if lag is None:
            # Redis cannot tell after deletions in the stream; count, up to a cap.
            lag = len(client.xrange(key, min=f"({last_delivered}", count=STREAM_SCAN_LIMIT) or ())
        oldest = [
            t
            for t in (
                _stream_id_time(undelivered[0][0]) if undelivered else None,
                _oldest_pending(client, key, group) if pending else None,
            )
            if t is not None
        ]
        entries_read = info.get("entries-read")
        return QueueSample(
            now,
            depth=int(lag) + pending,
            oldest_age_seconds=age_seconds(now, min(oldest, default=None)),
            # delivered to the group and acknowledged
            completed_total=None if entries_read is None else max(0, int(entries_read) - pending),
            in_flight=pending,
        )

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()


def _oldest_pending(client: redis.Redis, key: str, group: str) -> datetime | None:
    summary = client.xpending(key, group)
    return _stream_id_time(summary.get("min")) if summary else None

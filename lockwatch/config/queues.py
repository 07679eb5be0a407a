"""A target's ``queues`` and ``workers``.

Every key is a field of a dataclass in :mod:`lockwatch.settings.queues`, by its
name or alias. Where the YAML differs, it is here:

- A queue is one flat mapping: its own fields, its thresholds (inherited from
  ``defaults.queues`` key by key) and its source, which is chosen by ``sql``,
  ``redis`` or ``preset``; a preset resolves into a plain source.
- A worker group's ``cpu`` is written as ``processes``, ``cgroup`` or
  ``prometheus``; a cgroup may be named by its systemd ``unit``; the queues a
  group works on may be named by a queue with sub-queues, meaning all of them.
- A queue's and a group's interval may not be shorter than its target's, and a
  queue's window must hold a few samples.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from typing import Annotated, Any

from lockwatch.config.keys import field_key, file_keys, values_of
from lockwatch.config.reader import Reading, Shape
from lockwatch.config.yamldata import FAILED, Loc, YamlMap, entries, subset
from lockwatch.sample.presets.registry import NEEDS_REDIS, PRESETS, preset_source
from lockwatch.settings.fields import Text, check, did_you_mean
from lockwatch.settings.queues import (
    CgroupCpu,
    ProcessMatch,
    PrometheusCpu,
    Queue,
    QueueSource,
    QueueThresholds,
    RedisQueueSource,
    SqlQueueSource,
    WorkerGroup,
)

MIN_WINDOW_SAMPLES = 3
_PRESET = field_key(Queue, "preset").key
_SQL = field_key(SqlQueueSource, "query").key
_REDIS = field_key(RedisQueueSource, "url").key
_KEYS = field_key(RedisQueueSource, "keys").key
_TIMEOUT = field_key(RedisQueueSource, "timeout").key
_PRESET_QUEUE = "queue"  # the library's own name of the queue
# what each kind of source takes; the first key names the kind
_SOURCE_KEYS = {
    _SQL: file_keys(SqlQueueSource),
    _REDIS: file_keys(RedisQueueSource),
    _PRESET: (_PRESET, _PRESET_QUEUE, _REDIS, _TIMEOUT),
}
_OF_ONE_KIND = {key for keys in _SOURCE_KEYS.values() for key in keys} - set(_SOURCE_KEYS)
_CPU_SOURCES = {"processes": ProcessMatch, "cgroup": CgroupCpu, "prometheus": PrometheusCpu}
_UNIT = "unit"  # a systemd unit: its cgroup is system.slice/<unit>


def _check_preset(name: str) -> str | None:
    return None if name in PRESETS else f"unknown preset {name!r} ({did_you_mean(name, PRESETS)})"


Preset = Annotated[Text, check(_check_preset)]


class Queues:
    """What one reading of the queues remembers, target by target."""

    def __init__(self) -> None:
        self.defaults = QueueThresholds()  # defaults.queues
        self.target_interval = 10.0  # the interval of the target being read
        # each target's queues whose name and source are fine: name -> the names it watches
        self.known: dict[Loc, dict[str, tuple[str, ...]]] = {}

    def shapes(self) -> dict[type, Shape]:
        return {
            Queue: _QueueShape(self),
            WorkerGroup: _WorkersShape(self),
            CgroupCpu: _CgroupShape(),
        }

    def interval(self, reading: Reading, cls: type[Any], raw: YamlMap) -> float | None:
        """The entry's own interval, when it has a usable one."""
        key = field_key(cls, "interval")
        seconds = reading.peek(key.annotation, raw.get(key.key))
        if seconds is not None and seconds < self.target_interval:
            reading.report(
                (*raw.loc, key.key),
                f"must be at least the target's interval ({self.target_interval:g}s)",
            )
            return None
        return seconds if isinstance(seconds, float) else None


class _QueueShape(Shape):
    def __init__(self, queues: Queues) -> None:
        self.queues = queues

    def keys(self, reading: Reading, cls: type[Any], raw: YamlMap) -> Collection[str]:
        own = [k for k in file_keys(cls) if k not in ("source", "thresholds")]
        sources = {key for keys in _SOURCE_KEYS.values() for key in keys}
        return {*own, *file_keys(QueueThresholds), *sources}

    def before(self, reading: Reading, raw: YamlMap, data: dict[str, object]) -> dict[str, object]:
        own = {key: data[key] for key in file_keys(Queue) if key in data}
        own["thresholds"] = thresholds = reading.value(
            QueueThresholds,
            YamlMap(
                raw.loc,
                {**values_of(self.queues.defaults), **subset(raw, file_keys(QueueThresholds))},
            ),
            raw.loc,
        )
        every = self.queues.interval(reading, Queue, raw) or self.queues.target_interval
        if thresholds is not FAILED and thresholds.window < MIN_WINDOW_SAMPLES * every:
            inherited = "" if "window" in raw else " (from defaults.queues)"
            reading.report(
                (*raw.loc, "window"),
                f"{thresholds.window:g}s{inherited} holds fewer than {MIN_WINDOW_SAMPLES} "
                f"samples taken every {every:g}s",
            )
        own["source"] = source = self._source(reading, raw, own)
        name = reading.peek(field_key(Queue, "name").annotation, raw.get("name"))
        if isinstance(source, QueueSource) and reading.names(raw.loc[:-1]).get(name) == raw.loc:
            # a group may name the queue (all its sub-queues) or one sub-queue
            watched = Queue(name, source).names
            known = self.queues.known.setdefault(raw.loc[:-2], {})
            known.update({name: watched, **{each: (each,) for each in watched}})
        return own

    def _source(self, reading: Reading, raw: YamlMap, own: dict[str, object]) -> object:
        kinds = [key for key in (_SQL, _PRESET) if key in raw]
        if _REDIS in raw and _PRESET not in raw:
            kinds.append(_REDIS)
        if len(kinds) != 1:
            reading.report(
                raw.loc,
                f"set one of '{_SQL}', '{_REDIS}' (with '{_KEYS}') or '{_PRESET}'"
                if not kinds
                else f"set only one of {', '.join(repr(k) for k in kinds)}",
            )
            return FAILED
        kind = kinds[0]
        for key in sorted(_OF_ONE_KIND - set(_SOURCE_KEYS[kind])):
            if key in raw:
                reading.report((*raw.loc, key), f"does not go with '{kind}'")
        if kind == _SQL:
            return reading.value(SqlQueueSource, subset(raw, _SOURCE_KEYS[_SQL]), raw.loc)
        if kind == _REDIS:
            if _KEYS not in raw:
                reading.report(raw.loc, f"'{_REDIS}' needs '{_KEYS}' (or a '{_PRESET}')")
                return FAILED
            return reading.value(RedisQueueSource, subset(raw, _SOURCE_KEYS[_REDIS]), raw.loc)
        own[_PRESET] = preset = reading.value(Preset, raw[_PRESET], (*raw.loc, _PRESET))
        return FAILED if preset is FAILED else self._preset(reading, raw, preset)

    @staticmethod
    def _preset(reading: Reading, raw: YamlMap, preset: str) -> object:
        needs_redis = preset in NEEDS_REDIS
        if needs_redis and _REDIS not in raw:
            reading.report(raw.loc, f"the {preset} preset needs '{_REDIS}' (the broker's URL)")
            return FAILED
        if not needs_redis and _REDIS in raw:
            reading.report((*raw.loc, _REDIS), f"the {preset} preset reads no Redis")
            return FAILED
        url = (
            reading.field(RedisQueueSource, "url", raw[_REDIS], (*raw.loc, _REDIS))
            if needs_redis
            else None
        )
        timeout = field_key(RedisQueueSource, "timeout").default
        if _TIMEOUT in raw:
            timeout = reading.field(
                RedisQueueSource, "timeout", raw[_TIMEOUT], (*raw.loc, _TIMEOUT)
            )
        queue = None
        if _PRESET_QUEUE in raw:
            queue = reading.value(Text, raw[_PRESET_QUEUE], (*raw.loc, _PRESET_QUEUE))
        if FAILED in (url, timeout, queue):
            return FAILED
        return preset_source(preset, queue=queue, redis_url=url, timeout=timeout)  # type: ignore[arg-type]


class _WorkersShape(Shape):
    def __init__(self, queues: Queues) -> None:
        self.queues = queues

    def keys(self, reading: Reading, cls: type[Any], raw: YamlMap) -> Collection[str]:
        return [*(k for k in file_keys(cls) if k != "cpu"), *_CPU_SOURCES]

    def before(self, reading: Reading, raw: YamlMap, data: dict[str, object]) -> dict[str, object]:
        known = self.queues.known.get(raw.loc[:-2], {})
        for loc, item in entries(data.get("queues")):
            if isinstance(item, str) and item and item not in known:
                message = "no such queue in this target"
                if known:
                    message += f" ({did_you_mean(item, known)})"
                reading.report(loc, message)
        cpu_keys = [key for key in _CPU_SOURCES if key in data]
        if len(cpu_keys) > 1:
            reading.report(
                raw.loc,
                f"set at most one of {', '.join(_CPU_SOURCES)} (got {', '.join(cpu_keys)})",
            )
        if not cpu_keys and "sessions" not in data:
            reading.report(
                raw.loc, f"bind the group with one of {', '.join(_CPU_SOURCES)}, or 'sessions'"
            )
        # every source given is read, so each one's own problems show too
        read = [reading.value(_CPU_SOURCES[k], data.pop(k), (*raw.loc, k)) for k in cpu_keys]
        if read:
            data["cpu"] = read[0] if len(read) == 1 else FAILED
        self.queues.interval(reading, WorkerGroup, raw)
        return data

    def after(self, reading: Reading, raw: YamlMap, value: Any) -> Any:
        group: WorkerGroup = value
        known = self.queues.known.get(raw.loc[:-2], {})
        expanded: list[str] = []
        for name in group.queues:
            expanded.extend(q for q in known[name] if q not in expanded)
        return replace(group, queues=tuple(expanded))


class _CgroupShape(Shape):
    """A cgroup by its systemd unit, or by its path under the root."""

    def keys(self, reading: Reading, cls: type[Any], raw: YamlMap) -> Collection[str]:
        return [*file_keys(cls), _UNIT]

    def before(self, reading: Reading, raw: YamlMap, data: dict[str, object]) -> dict[str, object]:
        if (_UNIT in data) == ("path" in data):
            reading.report(raw.loc, f"set either '{_UNIT}' (a systemd unit) or 'path', not both")
            data.pop(_UNIT, None)
            data["path"] = FAILED
        elif _UNIT in data:
            unit = reading.field(CgroupCpu, "path", data.pop(_UNIT), (*raw.loc, _UNIT))
            data["path"] = FAILED if unit is FAILED else f"system.slice/{unit}"
        return data

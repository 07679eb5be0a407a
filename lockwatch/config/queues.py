"""The ``queues`` and ``workers`` sections of a target, and ``defaults.queues``.

Part of the config loader (``config.py`` hands over its reader): every
problem is collected with its file, line and dotted path, and secrets (Redis
and Prometheus URLs) never appear in a message.
"""

from __future__ import annotations

import math
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path, PurePosixPath

import yaml

from lockwatch.config.loader import _check_interval, _child, _did_you_mean, _positive, _Reader
from lockwatch.sample.presets.registry import NEEDS_REDIS, PRESETS, preset_source
from lockwatch.settings.queues import (
    DEFAULT_CGROUP_ROOT,
    CgroupCpu,
    CpuSource,
    ProcessMatch,
    PrometheusCpu,
    Queue,
    QueueSource,
    QueueThresholds,
    RedisQueueSource,
    RedisType,
    SqlQueueSource,
    WorkerGroup,
)
from lockwatch.util.secrets import dsn_password

_THRESHOLD_KEYS = ("window", "min_growth", "stall_cpu")
_QUEUE_KEYS = (
    "name",
    "sql",
    "sub_queues",
    "redis",
    "key",
    "type",
    "group",
    "preset",
    "queue",
    "timeout",
    "interval",
    *_THRESHOLD_KEYS,
)
_WORKER_KEYS = ("name", "queues", "processes", "cgroup", "prometheus", "sessions", "interval")
_PROCESS_KEYS = ("cmdline", "pidfile", "children")
_CGROUP_KEYS = ("unit", "path", "root")
_PROMETHEUS_KEYS = ("url", "cpu", "processes", "timeout")
_CPU_SOURCES = ("processes", "cgroup", "prometheus")
_REDIS_SCHEMES = ("redis", "rediss", "unix")
_PATTERN = re.compile(r"[^\[\]]+")
MIN_WINDOW_SAMPLES = 3


def _url_password(url: str) -> str | None:
    try:
        password = urllib.parse.urlsplit(url).password
    except ValueError:
        return None
    return urllib.parse.unquote(password) if password else None


def _check_url(schemes: tuple[str, ...]) -> Callable[[str], str | None]:
    def check(url: str) -> str | None:
        withheld = "(the URL is not shown: it may hold a password)"
        try:
            parts = urllib.parse.urlsplit(url)
            parts.port  # noqa: B018  (raises on a bad port)
        except ValueError:
            return f"not a valid URL {withheld}"
        if parts.scheme not in schemes:
            return f"must start with {' or '.join(s + '://' for s in schemes)} {withheld}"
        if parts.scheme != "unix" and not parts.hostname:
            return f"has no host {withheld}"
        return None

    return check


def _check_regex(text: str) -> str | None:
    try:
        re.compile(text)
    except re.error as exc:
        return f"not a regular expression: {exc}"
    return None


def _check_pattern(text: str) -> str | None:
    if _PATTERN.fullmatch(text):
        return None
    return f"application_name patterns take * and ? only, not brackets: {text!r}"


def _check_cgroup_path(text: str) -> str | None:
    path = PurePosixPath(text)
    if path.is_absolute() or ".." in path.parts:
        return f"must be relative to the cgroup root, without '..': {text!r}"
    return None


def _fraction(data: object) -> float:
    if isinstance(data, bool) or not isinstance(data, int | float | str):
        raise ValueError(f"not a number: {data!r}")
    try:
        number = float(data)
    except ValueError:
        raise ValueError(f"not a number: {data!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"not a number: {data!r}")
    return number


class QueueConfig:
    """Reads queues and worker groups through the config loader's reader."""

    def __init__(self, reader: _Reader) -> None:
        self.r = reader

    # -- helpers -----------------------------------------------------------

    def number(
        self, node: yaml.Node, path: str, check: Callable[[float], str | None]
    ) -> float | None:
        value = self.r.value(node, path)
        if value is None:
            return None
        return self.r._checked(value, node, path, _fraction, check)

    def secret_url(self, node: yaml.Node, path: str, schemes: tuple[str, ...]) -> str | None:
        url = self.r.text(node, path)
        if url is None:
            return None
        self.r.secrets.append(url)
        password = _url_password(url) or dsn_password(url)
        if password:
            self.r.secrets.append(password)
        problem = _check_url(schemes)(url)
        if problem is not None:
            self.r.report(path, node, problem)
            return None
        return url

    # -- thresholds ----------------------------------------------------------

    def thresholds(
        self, entries: Mapping[str, yaml.Node], path: str, inherited: QueueThresholds
    ) -> QueueThresholds:
        thresholds = inherited
        if "window" in entries:
            window = self.r.duration(entries["window"], _child(path, "window"), _positive)
            if window is not None:
                thresholds = replace(thresholds, window=window)
        for key in ("min_growth", "stall_cpu"):
            if key in entries:
                value = self.number(entries[key], _child(path, key), _positive_number)
                if value is not None:
                    thresholds = replace(thresholds, **{key: value})
        return thresholds

    def defaults(self, node: yaml.Node, path: str) -> QueueThresholds:
        entries = self.r.mapping(node, path, _THRESHOLD_KEYS) or {}
        return self.thresholds(entries, path, QueueThresholds())

    # -- a target's sections ---------------------------------------------------

    def read(
        self,
        entries: Mapping[str, yaml.Node],
        path: str,
        defaults: QueueThresholds,
        interval: float,
    ) -> tuple[tuple[Queue, ...], tuple[WorkerGroup, ...]]:
        queues: list[Queue] = []
        taken: dict[str, str] = {}
        if "queues" in entries:
            queues_path = _child(path, "queues")
            for item_path, item in self.r.items(entries["queues"], queues_path):
                queue = self.queue(item, item_path, taken, defaults, interval)
                if queue is not None:
                    queues.append(queue)
        workers: list[WorkerGroup] = []
        if "workers" in entries:
            workers_path = _child(path, "workers")
            names: dict[str, str] = {}
            known = {queue.name: queue.names for queue in queues}
            known.update({name: (name,) for queue in queues for name in queue.names})
            for item_path, item in self.r.items(entries["workers"], workers_path):
                group = self.worker_group(item, item_path, names, known, interval)
                if group is not None:
                    workers.append(group)
        return tuple(queues), tuple(workers)

    def interval(
        self, entries: Mapping[str, yaml.Node], path: str, target_interval: float
    ) -> float | None:
        if "interval" not in entries:
            return None

        def check(seconds: float) -> str | None:
            problem = _check_interval(seconds)
            if problem is None and seconds < target_interval:
                problem = f"must be at least the target's interval ({target_interval:g}s)"
            return problem

        return self.r.duration(entries["interval"], _child(path, "interval"), check)

    def queue(
        self,
        node: yaml.Node,
        path: str,
        taken: dict[str, str],
        defaults: QueueThresholds,
        target_interval: float,
    ) -> Queue | None:
        entries = self.r.mapping(node, path, _QUEUE_KEYS, required=("name",))
        if entries is None:
            return None
        name = self.r.unique_name(entries, path, taken)
        thresholds = self.thresholds(entries, path, defaults)
        interval = self.interval(entries, path, target_interval)
        every = interval or target_interval
        if thresholds.window < MIN_WINDOW_SAMPLES * every:
            inherited = "" if "window" in entries else " (from defaults.queues)"
            self.r.report(
                _child(path, "window"),
                entries.get("window", node),
                f"{thresholds.window:g}s{inherited} holds fewer than {MIN_WINDOW_SAMPLES} "
                f"samples taken every {every:g}s",
            )
        source = self.source(entries, node, path)
        if name is None or source is None:
            return None
        # read once already by source(), so it is a valid preset name here
        preset = self.r.text(entries["preset"], "") if "preset" in entries else None
        return Queue(name, source, thresholds, interval, preset)

    def source(
        self, entries: Mapping[str, yaml.Node], node: yaml.Node, path: str
    ) -> QueueSource | None:
        kinds = [key for key in ("sql", "preset") if key in entries]
        if "redis" in entries and "preset" not in entries:
            kinds.append("redis")
        if len(kinds) != 1:
            problem = (
                "set one of 'sql', 'redis' (with 'key') or 'preset'"
                if not kinds
                else f"set only one of {', '.join(repr(k) for k in kinds)}"
            )
            self.r.report(path, node, problem)
            return None
        kind = kinds[0]
        self._refuse_others(entries, path, kind)
        timeout = 2.0
        if "timeout" in entries:
            timeout = self.r.duration(entries["timeout"], _child(path, "timeout"), _positive) or 2.0
        if kind == "sql":
            query = self.r.text(entries["sql"], _child(path, "sql"))
            subs: tuple[str, ...] = ()
            if "sub_queues" in entries:
                subs = self.sub_queues(entries["sub_queues"], _child(path, "sub_queues"))
            return None if query is None else SqlQueueSource(query, sub_queues=subs)
        redis_url = None
        if "redis" in entries:
            redis_url = self.secret_url(entries["redis"], _child(path, "redis"), _REDIS_SCHEMES)
        if kind == "redis":
            return self.redis_source(entries, node, path, redis_url, timeout)
        preset = self.r.text(entries["preset"], _child(path, "preset"))
        if preset is None:
            return None
        if preset not in PRESETS:
            self.r.report(
                _child(path, "preset"),
                entries["preset"],
                f"unknown preset {preset!r} ({_did_you_mean(preset, PRESETS)})",
            )
            return None
        if preset in NEEDS_REDIS and "redis" not in entries:
            self.r.report(path, node, f"the {preset} preset needs 'redis' (the broker's URL)")
            return None
        if preset not in NEEDS_REDIS and "redis" in entries:
            self.r.report(
                _child(path, "redis"), entries["redis"], f"the {preset} preset reads no Redis"
            )
            return None
        queue = None
        if "queue" in entries:
            queue = self.r.text(entries["queue"], _child(path, "queue"))
        if preset in NEEDS_REDIS and redis_url is None:
            return None
        return preset_source(preset, queue=queue, redis_url=redis_url, timeout=timeout)

    def _refuse_others(self, entries: Mapping[str, yaml.Node], path: str, kind: str) -> None:
        allowed = {
            "sql": {"sub_queues"},
            "redis": {"key", "type", "group", "timeout"},
            "preset": {"queue", "redis", "timeout"},
        }[kind]
        specific = {"sub_queues", "key", "type", "group", "queue", "timeout"}
        for key in sorted(specific - allowed):
            if key in entries:
                self.r.report(_child(path, key), entries[key], f"does not go with '{kind}'")

    def sub_queues(self, node: yaml.Node, path: str) -> tuple[str, ...]:
        names = self.r.unique_items(node, path, self.r.text, repr)
        if isinstance(node, yaml.SequenceNode) and not node.value:
            self.r.report(path, node, "needs at least one sub-queue")
        return tuple(names)

    def redis_source(
        self,
        entries: Mapping[str, yaml.Node],
        node: yaml.Node,
        path: str,
        url: str | None,
        timeout: float,
    ) -> RedisQueueSource | None:
        if "key" not in entries:
            self.r.report(path, node, "'redis' needs 'key' (or a 'preset')")
            return None
        key_node = entries["key"]
        key_path = _child(path, "key")
        if isinstance(key_node, yaml.SequenceNode):
            keys = self.r.strings(key_node, key_path)
        else:
            key = self.r.text(key_node, key_path)
            keys = () if key is None else (key,)
        redis_type = RedisType.LIST
        if "type" in entries:
            text = self.r.text(entries["type"], _child(path, "type"))
            choices = [t.value for t in RedisType]
            if text is not None and text not in choices:
                self.r.report(
                    _child(path, "type"),
                    entries["type"],
                    f"unknown type {text!r} ({_did_you_mean(text, choices)})",
                )
                return None
            if text is not None:
                redis_type = RedisType(text)
        group = None
        if "group" in entries:
            group = self.r.text(entries["group"], _child(path, "group"))
            if redis_type is not RedisType.STREAM:
                self.r.report(_child(path, "group"), entries["group"], "only a stream has groups")
                return None
        if redis_type is RedisType.STREAM and len(keys) > 1:
            self.r.report(key_path, key_node, "a stream queue reads one key")
            return None
        if url is None or not keys:
            return None
        return RedisQueueSource(url, keys, type=redis_type, group=group, timeout=timeout)

    # -- worker groups -------------------------------------------------------

    def worker_group(
        self,
        node: yaml.Node,
        path: str,
        names: dict[str, str],
        known: Mapping[str, tuple[str, ...]],
        target_interval: float,
    ) -> WorkerGroup | None:
        entries = self.r.mapping(node, path, _WORKER_KEYS, required=("name", "queues"))
        if entries is None:
            return None
        name = self.r.unique_name(entries, path, names)
        queues: list[str] = []
        if "queues" in entries:
            queues_path = _child(path, "queues")
            for item_path, item in self.r.items(entries["queues"], queues_path):
                queue = self.r.text(item, item_path)
                if queue is None:
                    continue
                if queue not in known:
                    message = "no such queue in this target"
                    if known:
                        message += f" ({_did_you_mean(queue, known)})"
                    self.r.report(item_path, item, message)
                    continue
                queues.extend(q for q in known[queue] if q not in queues)
        cpu_keys = [key for key in _CPU_SOURCES if key in entries]
        if len(cpu_keys) > 1:
            self.r.report(
                path,
                node,
                f"set at most one of {', '.join(_CPU_SOURCES)} (got {', '.join(cpu_keys)})",
            )
        if not cpu_keys and "sessions" not in entries:
            self.r.report(
                path, node, f"bind the group with one of {', '.join(_CPU_SOURCES)}, or 'sessions'"
            )
        readers = {
            "processes": self.processes,
            "cgroup": self.cgroup,
            "prometheus": self.prometheus,
        }
        # every source given is read, so each one's own problems show too
        read = [readers[key](entries[key], _child(path, key)) for key in cpu_keys]
        cpu: CpuSource | None = read[0] if len(read) == 1 else None
        sessions: tuple[str, ...] = ()
        if "sessions" in entries:
            sessions_path = _child(path, "sessions")
            found = (
                self.r.text(item, item_path, _check_pattern)
                for item_path, item in self.r.items(entries["sessions"], sessions_path)
            )
            sessions = tuple(p for p in found if p is not None)
        interval = self.interval(entries, path, target_interval)
        if name is None or (cpu_keys and cpu is None and not sessions):
            return None
        return WorkerGroup(name, tuple(queues), cpu, sessions, interval)

    def processes(self, node: yaml.Node, path: str) -> ProcessMatch | None:
        entries = self.r.mapping(node, path, _PROCESS_KEYS)
        if entries is None:
            return None
        if "cmdline" not in entries and "pidfile" not in entries:
            self.r.report(path, node, "set 'cmdline' (a regular expression) or 'pidfile'")
            return None
        cmdline = None
        if "cmdline" in entries:
            cmdline = self.r.text(entries["cmdline"], _child(path, "cmdline"), _check_regex)
        pidfile: Path | None = None
        if "pidfile" in entries:
            pidfile = self.r.path_value(entries["pidfile"], _child(path, "pidfile"))
        children = True
        if "children" in entries:
            read = self.r.boolean(entries["children"], _child(path, "children"))
            children = True if read is None else read
        if cmdline is None and pidfile is None:
            return None
        return ProcessMatch(cmdline, pidfile, children)

    def cgroup(self, node: yaml.Node, path: str) -> CgroupCpu | None:
        entries = self.r.mapping(node, path, _CGROUP_KEYS)
        if entries is None:
            return None
        if ("unit" in entries) == ("path" in entries):
            self.r.report(path, node, "set either 'unit' (a systemd unit) or 'path', not both")
            return None
        relative = None
        if "unit" in entries:
            unit = self.r.text(entries["unit"], _child(path, "unit"), _check_cgroup_path)
            relative = None if unit is None else f"system.slice/{unit}"
        else:
            relative = self.r.text(entries["path"], _child(path, "path"), _check_cgroup_path)
        root = DEFAULT_CGROUP_ROOT
        if "root" in entries:
            root = self.r.path_value(entries["root"], _child(path, "root")) or root
        return None if relative is None else CgroupCpu(relative, root)

    def prometheus(self, node: yaml.Node, path: str) -> PrometheusCpu | None:
        entries = self.r.mapping(node, path, _PROMETHEUS_KEYS, required=("url", "cpu"))
        if entries is None:
            return None
        url = None
        if "url" in entries:
            url = self.secret_url(entries["url"], _child(path, "url"), ("http", "https"))
        cpu = None
        if "cpu" in entries:
            cpu = self.r.text(entries["cpu"], _child(path, "cpu"))
        processes = None
        if "processes" in entries:
            processes = self.r.text(entries["processes"], _child(path, "processes"))
        timeout = 5.0
        if "timeout" in entries:
            timeout = self.r.duration(entries["timeout"], _child(path, "timeout"), _positive) or 5.0
        if url is None or cpu is None:
            return None
        return PrometheusCpu(url, cpu, processes, timeout)


def _positive_number(number: float) -> str | None:
    return None if number > 0 else "must be greater than 0"

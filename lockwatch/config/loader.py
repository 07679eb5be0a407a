"""YAML or command-line flags -> frozen :class:`~lockwatch.settings.Settings`.

Every problem in a file is collected in one pass and reported together, each
with the file, a dotted path (``targets[0].locks.named[2].key``) and a line, so
an operator fixes a config in one edit instead of one restart per typo.

Secrets stay out of every message: a DSN is never echoed, nor is any value that
came from an environment variable or a ``*_file``.
"""

from __future__ import annotations

import difflib
import ipaddress
import math
import os
import re
from collections.abc import Callable, Collection, Hashable, Iterator, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import NamedTuple, TypeVar
from urllib.parse import urlsplit

import psycopg
import psycopg.conninfo
import yaml

from lockwatch.config.web import load_web_config
from lockwatch.model.findings import FindingKind, Severity
from lockwatch.model.locks import LockKey
from lockwatch.settings.jobs import JobSpec, PingSettings
from lockwatch.settings.locks import AllowedHolders, IpNetwork, LockRole, LockSettings, NamedLock
from lockwatch.settings.notify import (
    CHANNEL_TYPES,
    TELEGRAM_API,
    Channel,
    NotifySettings,
    Route,
    SlackChannel,
    TelegramChannel,
    WebhookChannel,
)
from lockwatch.settings.queues import QueueThresholds
from lockwatch.settings.targets import DEFAULT_LISTEN, Settings, Target, parse_listen
from lockwatch.settings.web import WebConfig, WebConfigError
from lockwatch.util.secrets import dsn_password, redact

__all__ = [
    "ConfigError",
    "ConfigProblem",
    "load_settings",
    "parse_duration",
    "settings_from_flags",
]

COMMAND_LINE = "<command line>"
DEFAULT_TARGET = "default"
MIN_INTERVAL = 0.1
MAX_TOP_N = 1000

_T = TypeVar("_T")
_H = TypeVar("_H", bound=Hashable)

# ---------------------------------------------------------------------------
# Durations

_UNITS: dict[str, Fraction] = {
    "ms": Fraction(1, 1000),
    "s": Fraction(1),
    "m": Fraction(60),
    "h": Fraction(3600),
}
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_COMPONENT = re.compile(rf"({_NUMBER})(ms|s|m|h)")
_DURATION = re.compile(rf"(?:{_NUMBER}(?:ms|s|m|h))+")
_BARE_NUMBER = re.compile(_NUMBER)
_DURATION_HINT = "use 500ms, 5s, 2m, 1h"


def parse_duration(value: str | int | float) -> float:
    """Seconds in a duration written the way operators write them.

    Numbers go through :class:`~fractions.Fraction` so ``"3ms"`` is exactly the
    float nearest to 3/1000 rather than an accumulated rounding error.

    >>> [parse_duration(v) for v in ("500ms", "5s", "2m", "1h30m", "1.5s", "10", 7)]
    [0.5, 5.0, 120.0, 5400.0, 1.5, 10.0, 7.0]
    >>> parse_duration("5 minutes")
    Traceback (most recent call last):
    ...
    ValueError: not a duration: '5 minutes' (use 500ms, 5s, 2m, 1h)
    """
    # bool is an int, but `interval: yes` is a mistake, not one second
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"not a duration: {value!r} ({_DURATION_HINT})")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError(f"not a duration: {value!r} ({_DURATION_HINT})")
        if value < 0:
            raise ValueError(f"negative duration: {value!r}")
        return float(value)
    text = value.strip()
    if text.startswith("-") and _duration_seconds(text[1:]) is not None:
        raise ValueError(f"negative duration: {value!r}")
    seconds = _duration_seconds(text)
    if seconds is None:
        raise ValueError(f"not a duration: {value!r} ({_DURATION_HINT})")
    return float(seconds)


def _duration_seconds(text: str) -> Fraction | None:
    if _BARE_NUMBER.fullmatch(text):
        return Fraction(text)
    if not _DURATION.fullmatch(text):
        return None
    return sum(
        (Fraction(number) * _UNITS[unit] for number, unit in _COMPONENT.findall(text)),
        Fraction(0),
    )


# ---------------------------------------------------------------------------
# Problems


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    file: str
    path: str  # dotted, with indexes: targets[0].locks.named[2].key; "" for the whole file
    line: int | None
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class ConfigError(Exception):
    """Everything wrong with one configuration, one problem per line."""

    def __init__(self, problems: Collection[ConfigProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(str(problem) for problem in self.problems)


# ---------------------------------------------------------------------------
# Checks shared by the file and the command line: a message, or None when fine


def _at_least(minimum: float, shown: str) -> Callable[[float], str | None]:
    return lambda seconds: None if seconds >= minimum else f"must be at least {shown}"


def _positive(seconds: float) -> str | None:
    return None if seconds > 0 else "must be greater than 0"


def _anything(_: float) -> str | None:
    return None


_check_interval = _at_least(MIN_INTERVAL, "100ms")


def _int_range(low: int, high: int | None) -> Callable[[int], str | None]:
    def check(number: int) -> str | None:
        if number < low:
            return f"must be at least {low}"
        if high is not None and number > high:
            return f"must be at most {high}"
        return None

    return check


_check_convoy_waiters = _int_range(1, None)
_check_top_n = _int_range(0, MAX_TOP_N)

_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def _check_name(name: str) -> str | None:
    if _NAME.fullmatch(name):
        return None
    return f"not a valid name: {name!r} (use letters, digits, '_', '.', '-')"


def _check_listen(listen: str) -> str | None:
    """
    >>> _check_listen("[::1]:10057") is None, _check_listen("0.0.0.0:80") is None
    (True, True)
    >>> _check_listen("localhost")
    "not host:port: 'localhost' (e.g. 127.0.0.1:10057 or [::1]:10057)"
    """
    try:
        _, port = parse_listen(listen)
    except ValueError as exc:
        return str(exc)
    # Port 0 (any free port) suits tests, not a daemon Prometheus must find.
    return "port must be a number from 1 to 65535, got '0'" if port == 0 else None


_SSLMODES = frozenset({"disable", "allow", "prefer", "require", "verify-ca", "verify-full"})


def _check_dsn(dsn: str) -> str | None:
    """What is wrong with a DSN, in words that never quote it: it may hold a password.

    libpq's own messages quote the string (all of it, for a bad URI), so they are
    classified rather than passed on.

    >>> _check_dsn("postgresql://app:hunter2@[::1/x")
    'not a valid postgresql:// URI (the DSN is not shown: it may hold a password)'
    """
    withheld = "(the DSN is not shown: it may hold a password)"
    if not dsn.strip():
        return "is empty"
    try:
        parts = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        detail = str(exc)
        if "invalid connection option" in detail:
            what = "has an unknown connection option"
        elif 'missing "="' in detail:
            what = "has a word without '=' (quote values with spaces: key='a b')"
        elif "unterminated quoted string" in detail:
            what = "has an unterminated quoted string"
        elif "URI" in detail:
            what = "not a valid postgresql:// URI"
        else:
            what = "cannot be parsed as a connection string"
        return f"{what} {withheld}"
    for port in str(parts.get("port") or "").split(","):
        if port and not (port.isdigit() and 1 <= int(port) <= 65535):
            return f"has a port that is not a number from 1 to 65535 {withheld}"
    sslmode = parts.get("sslmode")
    if sslmode is not None and sslmode not in _SSLMODES:
        return f"has an sslmode other than {', '.join(sorted(_SSLMODES))} {withheld}"
    return None


def _did_you_mean(word: str, choices: Collection[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    if close:
        return f"did you mean {close[0]!r}?"
    return "expected one of: " + ", ".join(sorted(choices))


# ---------------------------------------------------------------------------
# The YAML reader

_ENV_REFERENCE = re.compile(r"\$(\$\{)|\$\{([^}]*)\}|\$\{")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_YAML_TYPES = {
    "tag:yaml.org,2002:str": "a string",
    "tag:yaml.org,2002:int": "an integer",
    "tag:yaml.org,2002:float": "a number",
    "tag:yaml.org,2002:bool": "true/false",
    "tag:yaml.org,2002:null": "nothing",
    "tag:yaml.org,2002:timestamp": "a timestamp",
}
_STR_TAG = "tag:yaml.org,2002:str"
_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"


class _Value(NamedTuple):
    data: object
    # "${A}, ${B}" when the value came from the environment: then it is never shown
    origin: str | None = None

    def hide(self, message: str) -> str:
        """A message that quotes this value, minus the value when it may be a secret."""
        if self.origin is None:
            return message
        return message.replace(repr(self.data), f"(the value of {self.origin}, not shown)")


def _kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    return _YAML_TYPES.get(node.tag, f"a {node.tag} value")


def _line(node: yaml.Node | None) -> int | None:
    return None if node is None else node.start_mark.line + 1


def _index(path: str, i: int) -> str:
    return f"{path}[{i}]"


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


_LOCK_FIELDS = ("max_hold", "orphan_after", "convoy_waiters", "convoy_wait", "top_n", "ignore")
_TIMING_FIELDS = ("interval", "connect_timeout", "statement_timeout")
_TOP_KEYS = ("listen", "state_dir", "web_config", "defaults", "targets", "notify", "pings", "jobs")
_DEFAULTS_KEYS = (*_TIMING_FIELDS, "locks", "queues")
_TARGET_KEYS = (
    "name",
    "dsn",
    "dsn_file",
    *_TIMING_FIELDS,
    "locks",
    "queues",
    "workers",
    "pgbouncer",
)
_TARGET_LOCK_KEYS = (*_LOCK_FIELDS, "named")
_NAMED_KEYS = (
    "name",
    "key",
    "role",
    "database",
    "max_hold",
    "orphan_after",
    "allowed_holders",
    "ignore",
)
_HOLDER_KEYS = ("applications", "addresses")


# Target's own defaults, so the file and the flags cannot drift apart
_TIMING_DEFAULTS: dict[str, float] = {
    key: getattr(Target(name="", dsn=""), key) for key in _TIMING_FIELDS
}
_TIMING_CHECKS: dict[str, Callable[[float], str | None]] = {
    "interval": _check_interval,
    "connect_timeout": _positive,
    "statement_timeout": _positive,
}


@dataclass(frozen=True, slots=True)
class _Ignored:
    key: LockKey
    where: str  # dotted path of the entry, for "both named and ignored"


class _Reader:
    """Walks composed YAML nodes, turning them into values and collecting problems.

    Each reading method returns None (after recording why) when the node is
    unusable, so the caller falls back to a default and keeps going.
    """

    def __init__(self, file: str, base_dir: Path, environ: Mapping[str, str]) -> None:
        self.file = file
        self.base_dir = base_dir
        self.environ = environ
        self.problems: list[ConfigProblem] = []
        self.secrets: list[str] = []
        # only its constructor is used: for scalars, and to resolve `<<` merge keys
        self._loader = yaml.SafeLoader("")
        self._flattened: set[int] = set()

    def report(self, path: str, node: yaml.Node | None, message: str) -> None:
        self.problems.append(ConfigProblem(self.file, path, _line(node), message))

    # -- structure ---------------------------------------------------------

    def mapping(
        self,
        node: yaml.Node,
        path: str,
        keys: Collection[str],
        required: Collection[str] = (),
    ) -> dict[str, yaml.Node] | None:
        if not isinstance(node, yaml.MappingNode) or node.tag != _MAP_TAG:
            self.report(path, node, f"expected a mapping (key: value), got {_kind(node)}")
            return None
        if not self._flatten(node, path):
            return None
        entries: dict[str, yaml.Node] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != _STR_TAG:
                self.report(path, key_node, f"keys must be strings, got {_kind(key_node)}")
                continue
            key = str(key_node.value)
            if key not in keys:
                self.report(
                    _child(path, key), key_node, f"unknown key ({_did_you_mean(key, keys)})"
                )
                continue
            entries[key] = value_node
        for key in required:
            if key not in entries:
                self.report(path, node, f"missing required key {key!r}")
        return entries

    def _flatten(self, node: yaml.MappingNode, path: str) -> bool:
        """Resolve ``<<`` merges; report keys written twice (PyYAML keeps the last silently)."""
        if id(node) in self._flattened:
            return True
        self._flattened.add(id(node))
        seen: set[object] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                if key_node.value in seen:
                    self.report(
                        _child(path, str(key_node.value)), key_node, "key given more than once"
                    )
                seen.add(key_node.value)
        try:
            self._loader.flatten_mapping(node)
        except yaml.MarkedYAMLError as exc:
            self.report(path, node, f"cannot merge: {exc.problem}")
            return False
        # flattening puts merged entries first, so a key written here still wins
        return True

    def sequence(self, node: yaml.Node, path: str) -> list[yaml.Node] | None:
        if not isinstance(node, yaml.SequenceNode) or node.tag != _SEQ_TAG:
            self.report(path, node, f"expected a list, got {_kind(node)}")
            return None
        return list(node.value)

    def items(self, node: yaml.Node, path: str) -> Iterator[tuple[str, yaml.Node]]:
        for i, item in enumerate(self.sequence(node, path) or ()):
            yield _index(path, i), item

    def unique_items(
        self,
        node: yaml.Node,
        path: str,
        read: Callable[[yaml.Node, str], _H | None],
        shown: Callable[[_H], str],
    ) -> dict[_H, str]:
        """A list's items, each with its path; a repeated one is reported and left out."""
        found: dict[_H, str] = {}
        for item_path, item in self.items(node, path):
            value = read(item, item_path)
            if value is None:
                continue
            if value in found:
                self.report(item_path, item, f"{shown(value)} is already listed at {found[value]}")
                continue
            found[value] = item_path
        return found

    # -- scalars -----------------------------------------------------------

    def value(self, node: yaml.Node, path: str) -> _Value | None:
        if not isinstance(node, yaml.ScalarNode):
            self.report(path, node, f"expected a single value, got {_kind(node)}")
            return None
        if node.tag == "tag:yaml.org,2002:null":
            self.report(path, node, "has no value")
            return None
        try:
            data = self._loader.construct_object(node)
        except yaml.MarkedYAMLError as exc:
            self.report(path, node, f"cannot read this value: {exc.problem}")
            return None
        if isinstance(data, str):
            return self._expand(data, node, path)
        return _Value(data)

    def _expand(self, text: str, node: yaml.Node, path: str) -> _Value | None:
        used: list[str] = []
        missing: list[str] = []

        def substitute(match: re.Match[str]) -> str:
            if match.group(1):
                return "${"
            name = match.group(2)
            if name is None:
                missing.append("an unterminated '${' (write $${ for a literal ${)")
                return ""
            if not _ENV_NAME.fullmatch(name):
                missing.append(f"${{{name}}} is not a valid variable reference")
                return ""
            used.append(f"${{{name}}}")
            if name not in self.environ:
                missing.append(f"environment variable {name} is not set")
                return ""
            return self.environ[name]

        expanded = _ENV_REFERENCE.sub(substitute, text)
        for message in missing:
            self.report(path, node, message)
        if missing:
            return None
        return _Value(expanded, ", ".join(used) if used else None)

    def text(
        self, node: yaml.Node, path: str, check: Callable[[str], str | None] | None = None
    ) -> str | None:
        value = self.value(node, path)
        if value is None:
            return None
        if not isinstance(value.data, str):
            self.report(path, node, f"expected a string, got {_kind(node)}")
            return None
        if not value.data:
            self.report(path, node, "is empty")
            return None
        problem = check(value.data) if check else None
        if problem is not None:
            self.report(path, node, value.hide(problem))
            return None
        return value.data

    def strings(self, node: yaml.Node, path: str) -> tuple[str, ...]:
        found = (self.text(item, item_path) for item_path, item in self.items(node, path))
        return tuple(text for text in found if text is not None)

    def duration(
        self, node: yaml.Node, path: str, check: Callable[[float], str | None]
    ) -> float | None:
        value = self.value(node, path)
        if value is None:
            return None
        return self._checked(value, node, path, _to_seconds, check)

    def integer(self, node: yaml.Node, path: str, check: Callable[[int], str | None]) -> int | None:
        value = self.value(node, path)
        if value is None:
            return None
        return self._checked(value, node, path, _to_int, check)

    def boolean(self, node: yaml.Node, path: str) -> bool | None:
        value = self.value(node, path)
        if value is None:
            return None
        if not isinstance(value.data, bool):
            self.report(path, node, f"expected true or false, got {_kind(node)}")
            return None
        return value.data

    def lock_key(self, node: yaml.Node, path: str) -> LockKey | None:
        value = self.value(node, path)
        if value is None:
            return None
        return self._checked(value, node, path, _to_lock_key, lambda _: None)

    def _checked(
        self,
        value: _Value,
        node: yaml.Node,
        path: str,
        convert: Callable[[object], _T],
        check: Callable[[_T], str | None],
    ) -> _T | None:
        try:
            result = convert(value.data)
        except ValueError as exc:
            self.report(path, node, value.hide(str(exc)))
            return None
        problem = check(result)
        if problem is not None:
            self.report(path, node, problem)
            return None
        return result

    def path_value(self, node: yaml.Node, path: str) -> Path | None:
        """A path; relative ones are meant from the config file, not the daemon's cwd."""
        text = self.text(node, path)
        return None if text is None else self.base_dir / text

    def unique_name(
        self, entries: Mapping[str, yaml.Node], path: str, taken: dict[str, str]
    ) -> str | None:
        """The entry's name, checked for format and against the names before it
        (``taken`` maps each name to where it was first used)."""
        if "name" not in entries:
            return None
        name_path = _child(path, "name")
        name = self.text(entries["name"], name_path, _check_name)
        if name is None:
            return None
        if name in taken:
            self.report(name_path, entries["name"], f"{name!r} is already used at {taken[name]}")
            return None
        taken[name] = path
        return name

    def secret(
        self,
        entries: dict[str, yaml.Node],
        node: yaml.Node,
        path: str,
        key: str,
        check: Callable[[str], str | None],
    ) -> str | None:
        """A token or URL from ``<key>_file`` or from ``${VAR}``; never written
        in the config file itself, which is read by more eyes than a secret."""
        file_key = f"{key}_file"
        if key in entries and file_key in entries:
            self.report(path, node, f"set either {key!r} or {file_key!r}, not both")
            return None
        if file_key in entries:
            where = _child(path, file_key)
            secret = self.secret_file(entries[file_key], where)
        elif key in entries:
            where = _child(path, key)
            value = self.value(entries[key], where)
            if value is None:
                return None
            if not isinstance(value.data, str) or not value.data:
                self.report(where, entries[key], f"expected a string, got {_kind(entries[key])}")
                return None
            self.secrets.append(value.data)
            if value.origin is None:
                self.report(
                    where,
                    entries[key],
                    f"keep the secret out of the config file: use {file_key}, "
                    f"or take it from the environment with ${{VAR}}",
                )
                return None
            secret = value.data
        else:
            self.report(path, node, f"missing required key {key!r} (or {file_key!r})")
            return None
        if secret is None:
            return None
        problem = check(secret)
        if problem is not None:
            self.report(where, entries.get(file_key, entries.get(key)), problem)
            return None
        return secret

    def secret_file(self, node: yaml.Node, path: str) -> str | None:
        file = self.path_value(node, path)
        if file is None:
            return None
        try:
            content = file.read_text(encoding="utf-8").rstrip()
        except FileNotFoundError:
            self.report(path, node, f"no such file: {file}")
            return None
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
            self.report(path, node, f"cannot read {file}: {reason}")
            return None
        if not content:
            self.report(path, node, f"file is empty: {file}")
            return None
        self.secrets.append(content)
        return content


def _to_seconds(data: object) -> float:
    if isinstance(data, str | int | float):
        return parse_duration(data)
    raise ValueError(f"not a duration: {data!r} ({_DURATION_HINT})")


def _to_int(data: object) -> int:
    # quoted and ${VAR} numbers are fine; true/false and 2.5 are mistakes
    if isinstance(data, bool) or not isinstance(data, int | str):
        raise ValueError(f"not a whole number: {data!r}")
    try:
        return int(data)
    except ValueError:
        raise ValueError(f"not a whole number: {data!r}") from None


def _to_lock_key(data: object) -> LockKey:
    if isinstance(data, bool) or not isinstance(data, int | str):
        raise ValueError(f'not an advisory lock key: {data!r} (use 42 or "7,13")')
    return LockKey.parse(str(data))


def _check_address(text: str) -> str | None:
    """
    >>> _check_address("10.1.2.3/8")
    "host bits set in '10.1.2.3/8' (did you mean 10.0.0.0/8?)"
    """
    if text == "local":
        return None
    try:
        ipaddress.ip_network(text)
    except ValueError as exc:
        if "host bits set" in str(exc):
            loose = ipaddress.ip_network(text, strict=False)
            return f"host bits set in {text!r} (did you mean {loose}?)"
        return f"not an address, a CIDR or 'local': {text!r}"
    return None


# ---------------------------------------------------------------------------
# Schema


class _Loader:
    """The schema: which keys go where, what each one means, how levels inherit."""

    def __init__(self, reader: _Reader) -> None:
        from lockwatch.config.jobs import JobConfig
        from lockwatch.config.queues import QueueConfig

        self.r = reader
        self.queues = QueueConfig(reader)
        self.jobs = JobConfig(self)
        self.queue_defaults = QueueThresholds()

    def settings(self, root: yaml.Node, source: Path) -> Settings:
        top = self.r.mapping(root, "", _TOP_KEYS, required=("targets",)) or {}
        listen = DEFAULT_LISTEN
        if "listen" in top:
            listen = self.r.text(top["listen"], "listen", _check_listen) or listen
        state_dir = None
        if "state_dir" in top:
            state_dir = self.r.path_value(top["state_dir"], "state_dir")
            if state_dir is not None and state_dir.exists() and not state_dir.is_dir():
                self.r.report("state_dir", top["state_dir"], f"not a directory: {state_dir}")
        timing, locks = dict(_TIMING_DEFAULTS), LockSettings()
        ignored: tuple[_Ignored, ...] = ()
        if "defaults" in top:
            timing, locks, ignored = self.defaults(top["defaults"])
        targets = []
        names: dict[str, str] = {}
        if "targets" in top:
            entries = list(self.r.items(top["targets"], "targets"))
            if isinstance(top["targets"], yaml.SequenceNode) and not entries:
                self.r.report("targets", top["targets"], "needs at least one target")
            for path, node in entries:
                target = self.target(node, path, names, timing, locks, ignored)
                if target is not None:
                    targets.append(target)
        notify = NotifySettings()
        if "notify" in top:
            notify = _NotifyLoader(self.r).notify(top["notify"], names)
        pings = PingSettings()
        if "pings" in top:
            pings = self.jobs.pings(top["pings"], "pings")
        jobs: tuple[JobSpec, ...] = ()
        if "jobs" in top:
            jobs = self.jobs.jobs(top["jobs"], "jobs", names, pings, state_dir)
        return Settings(
            tuple(targets),
            listen=listen,
            state_dir=state_dir,
            source=source,
            notify=notify,
            jobs=jobs,
            pings=pings,
            web=self.web_config(top["web_config"]) if "web_config" in top else None,
        )

    def web_config(self, node: yaml.Node) -> WebConfig | None:
        path = self.r.path_value(node, "web_config")
        if path is None:
            return None
        try:
            return load_web_config(path)
        except WebConfigError as exc:
            for problem in exc.problems:
                self.r.report("web_config", node, problem)
        return None

    def defaults(
        self, node: yaml.Node
    ) -> tuple[dict[str, float], LockSettings, tuple[_Ignored, ...]]:
        entries = self.r.mapping(node, "defaults", _DEFAULTS_KEYS) or {}
        timing = self.timing(entries, "defaults", _TIMING_DEFAULTS)
        locks = LockSettings()
        ignored: tuple[_Ignored, ...] = ()
        if "locks" in entries:
            locks_entries = self.r.mapping(entries["locks"], "defaults.locks", _LOCK_FIELDS) or {}
            locks, ignored = self.lock_settings(locks_entries, "defaults.locks", locks, ())
        if "queues" in entries:
            self.queue_defaults = self.queues.defaults(entries["queues"], "defaults.queues")
        return timing, locks, ignored

    def timing(
        self, entries: dict[str, yaml.Node], path: str, inherited: Mapping[str, float]
    ) -> dict[str, float]:
        timing = dict(inherited)
        for key, check in _TIMING_CHECKS.items():
            if key in entries:
                seconds = self.r.duration(entries[key], _child(path, key), check)
                if seconds is not None:
                    timing[key] = seconds
        return timing

    def lock_settings(
        self,
        entries: dict[str, yaml.Node],
        path: str,
        inherited: LockSettings,
        inherited_ignored: tuple[_Ignored, ...],
    ) -> tuple[LockSettings, tuple[_Ignored, ...]]:
        def duration(key: str, check: Callable[[float], str | None], default: float) -> float:
            if key not in entries:
                return default
            seconds = self.r.duration(entries[key], _child(path, key), check)
            return default if seconds is None else seconds

        def integer(key: str, check: Callable[[int], str | None], default: int) -> int:
            if key not in entries:
                return default
            number = self.r.integer(entries[key], _child(path, key), check)
            return default if number is None else number

        ignored = inherited_ignored
        if "ignore" in entries:
            # a target's list replaces the defaults' list, like every other setting
            ignored = self.ignore_list(entries["ignore"], _child(path, "ignore"))
        locks = replace(
            inherited,
            max_hold=duration("max_hold", _positive, inherited.max_hold),
            orphan_after=duration("orphan_after", _positive, inherited.orphan_after),
            convoy_wait=duration("convoy_wait", _anything, inherited.convoy_wait),
            convoy_waiters=integer(
                "convoy_waiters", _check_convoy_waiters, inherited.convoy_waiters
            ),
            top_n=integer("top_n", _check_top_n, inherited.top_n),
            ignore=tuple(entry.key for entry in ignored),
        )
        return locks, ignored

    def ignore_list(self, node: yaml.Node, path: str) -> tuple[_Ignored, ...]:
        found = self.r.unique_items(node, path, self.r.lock_key, lambda key: f"key {key}")
        return tuple(_Ignored(key, where) for key, where in found.items())

    def name(
        self, entries: Mapping[str, yaml.Node], path: str, taken: dict[str, str]
    ) -> str | None:
        return self.r.unique_name(entries, path, taken)

    def target(
        self,
        node: yaml.Node,
        path: str,
        names: dict[str, str],
        timing: Mapping[str, float],
        locks: LockSettings,
        ignored: tuple[_Ignored, ...],
    ) -> Target | None:
        entries = self.r.mapping(node, path, _TARGET_KEYS, required=("name",))
        if entries is None:
            return None
        name = self.name(entries, path, names)
        dsn = self.dsn(entries, node, path)
        own_timing = self.timing(entries, path, timing)
        if "locks" in entries:
            locks_path = _child(path, "locks")
            locks_entries = self.r.mapping(entries["locks"], locks_path, _TARGET_LOCK_KEYS) or {}
            locks, ignored = self.lock_settings(locks_entries, locks_path, locks, ignored)
            if "named" in locks_entries:
                named_path = _child(locks_path, "named")
                named = self.named_locks(locks_entries["named"], named_path, ignored)
                locks = replace(locks, named=named)
        queues, workers = self.queues.read(
            entries, path, self.queue_defaults, own_timing["interval"]
        )
        pgbouncer = None
        if "pgbouncer" in entries:
            pgbouncer = self.jobs.pgbouncer(entries["pgbouncer"], _child(path, "pgbouncer"))
        if name is None or dsn is None:
            return None
        return Target(
            name=name,
            dsn=dsn,
            interval=own_timing["interval"],
            connect_timeout=own_timing["connect_timeout"],
            statement_timeout=own_timing["statement_timeout"],
            locks=locks,
            queues=queues,
            workers=workers,
            pgbouncer=pgbouncer,
        )

    def dsn(self, entries: dict[str, yaml.Node], node: yaml.Node, path: str) -> str | None:
        if "dsn" in entries and "dsn_file" in entries:
            self.r.report(path, node, "set either 'dsn' or 'dsn_file', not both")
            return None
        if "dsn" in entries:
            key = "dsn"
            dsn = self.r.text(entries[key], _child(path, key))
        elif "dsn_file" in entries:
            key = "dsn_file"
            dsn = self.r.secret_file(entries[key], _child(path, key))
        else:
            self.r.report(path, node, "missing required key 'dsn' (or 'dsn_file')")
            return None
        if dsn is None:
            return None
        self.r.secrets.append(dsn)
        password = dsn_password(dsn)
        if password:
            self.r.secrets.append(password)
        problem = _check_dsn(dsn)
        if problem is not None:
            self.r.report(_child(path, key), entries[key], problem)
            return None
        return dsn

    def named_locks(
        self, node: yaml.Node, path: str, ignored: tuple[_Ignored, ...]
    ) -> tuple[NamedLock, ...]:
        names: dict[str, str] = {}
        placed: list[tuple[NamedLock, str]] = []
        for item_path, item in self.r.items(node, path):
            read = self.named_lock(item, item_path, names)
            if read is None:
                continue
            lock, key_node = read
            key_path = _child(item_path, "key")
            for other, other_path in placed:
                # a lock without a database covers them all, so it overlaps any other
                if other.key == lock.key and (
                    None in (other.database, lock.database) or other.database == lock.database
                ):
                    where = other.database or "every database"
                    self.r.report(
                        key_path,
                        key_node,
                        f"key {lock.key} is already named {other.name!r} at {other_path} "
                        f"(in {where})",
                    )
                    break
            for entry in ignored:
                # with a database, the named lock is an exception to a key ignored
                # elsewhere; without one, either the name or the ignore entry is dead
                if entry.key == lock.key and lock.database is None:
                    self.r.report(
                        key_path,
                        key_node,
                        f"key {lock.key} is both named and ignored (at {entry.where}); "
                        "remove it there and set 'ignore: true' on the named lock instead",
                    )
            placed.append((lock, item_path))
        return tuple(lock for lock, _ in placed)

    def named_lock(
        self, node: yaml.Node, path: str, names: dict[str, str]
    ) -> tuple[NamedLock, yaml.Node] | None:
        entries = self.r.mapping(node, path, _NAMED_KEYS, required=("name", "key"))
        if entries is None:
            return None
        name = self.name(entries, path, names)
        key = None
        if "key" in entries:
            key = self.r.lock_key(entries["key"], _child(path, "key"))
        role = LockRole.MUTEX
        if "role" in entries:
            role = self.role(entries["role"], _child(path, "role")) or role
        database = None
        if "database" in entries:
            database = self.r.text(entries["database"], _child(path, "database"))
        budgets: dict[str, float | None] = {"max_hold": None, "orphan_after": None}
        for field_name in budgets:
            if field_name in entries:
                budgets[field_name] = self.r.duration(
                    entries[field_name], _child(path, field_name), _positive
                )
        allowed = AllowedHolders()
        if "allowed_holders" in entries:
            allowed = self.allowed(entries["allowed_holders"], _child(path, "allowed_holders"))
        ignore = False
        if "ignore" in entries:
            ignore = bool(self.r.boolean(entries["ignore"], _child(path, "ignore")))
        if name is None or key is None:
            return None
        lock = NamedLock(
            name=name,
            key=key,
            role=role,
            database=database,
            max_hold=budgets["max_hold"],
            orphan_after=budgets["orphan_after"],
            allowed=allowed,
            ignore=ignore,
        )
        return lock, entries["key"]

    def role(self, node: yaml.Node, path: str) -> LockRole | None:
        text = self.r.text(node, path)
        if text is None:
            return None
        try:
            return LockRole(text)
        except ValueError:
            choices = [role.value for role in LockRole]
            self.r.report(path, node, f"unknown role {text!r} ({_did_you_mean(text, choices)})")
            return None

    def allowed(self, node: yaml.Node, path: str) -> AllowedHolders:
        entries = self.r.mapping(node, path, _HOLDER_KEYS) or {}
        applications: tuple[str, ...] = ()
        if "applications" in entries:
            applications = self.r.strings(entries["applications"], _child(path, "applications"))
        networks: list[IpNetwork] = []
        local = False
        if "addresses" in entries:
            for item_path, item in self.r.items(entries["addresses"], _child(path, "addresses")):
                text = self.r.text(item, item_path, _check_address)
                if text == "local":
                    local = True
                elif text is not None:
                    networks.append(ipaddress.ip_network(text))
        return AllowedHolders(applications=applications, networks=tuple(networks), local=local)


# ---------------------------------------------------------------------------
# The notify section

_NOTIFY_KEYS = ("for", "repeat_interval", "connect_timeout", "read_timeout", "channels", "routes")
_CHANNEL_KEYS: dict[str, tuple[str, ...]] = {
    "telegram": ("bot_token", "bot_token_file", "chat_id", "api_url"),
    "slack": ("webhook_url", "webhook_url_file"),
    "webhook": ("url", "url_file"),
}
_ALL_CHANNEL_KEYS = ("name", "type", *dict.fromkeys(k for ks in _CHANNEL_KEYS.values() for k in ks))
_ROUTE_KEYS = ("channels", "kinds", "severities", "targets", "for", "repeat_interval")
_NOT_SHOWN = "(the value is not shown: it may hold a secret)"
_BOT_TOKEN = re.compile(r"[^\s/]+")


def _check_http_url(text: str) -> str | None:
    """
    >>> _check_http_url("https://api.telegram.org") is None
    True
    >>> _check_http_url("api.telegram.org")
    'not an http:// or https:// URL (the value is not shown: it may hold a secret)'
    """
    parts = urlsplit(text)
    if parts.scheme in ("http", "https") and parts.hostname:
        return None
    return f"not an http:// or https:// URL {_NOT_SHOWN}"


class _NotifyLoader(_Loader):
    """``notify:``: channels with their secrets, routes and timings."""

    def notify(self, node: yaml.Node, targets: Collection[str]) -> NotifySettings:
        entries = self.r.mapping(node, "notify", _NOTIFY_KEYS) or {}
        default = NotifySettings()

        def seconds(key: str, check: Callable[[float], str | None], fallback: float) -> float:
            if key not in entries:
                return fallback
            value = self.r.duration(entries[key], _child("notify", key), check)
            return fallback if value is None else value

        channels: list[Channel] = []
        names: dict[str, str] = {}
        if "channels" in entries:
            for path, item in self.r.items(entries["channels"], "notify.channels"):
                channel = self.channel(item, path, names)
                if channel is not None:
                    channels.append(channel)
        routes = []
        if "routes" in entries:
            for path, item in self.r.items(entries["routes"], "notify.routes"):
                route = self.route(item, path, names, targets)
                if route is not None:
                    routes.append(route)
        return NotifySettings(
            channels=tuple(channels),
            routes=tuple(routes),
            for_duration=seconds("for", _anything, default.for_duration),
            repeat_interval=seconds("repeat_interval", _anything, default.repeat_interval),
            connect_timeout=seconds("connect_timeout", _positive, default.connect_timeout),
            read_timeout=seconds("read_timeout", _positive, default.read_timeout),
        )

    def channel(self, node: yaml.Node, path: str, names: dict[str, str]) -> Channel | None:
        entries = self.r.mapping(node, path, _ALL_CHANNEL_KEYS, required=("name", "type"))
        if entries is None:
            return None
        name = self.name(entries, path, names)
        kind = None
        if "type" in entries:
            kind = self.r.text(entries["type"], _child(path, "type"), self._check_type)
        if kind is None:
            return None
        own = ("name", "type", *_CHANNEL_KEYS[kind])
        for key in entries:
            if key not in own:
                self.r.report(
                    _child(path, key),
                    entries[key],
                    f"not a key of a {kind} channel (those are: {', '.join(own)})",
                )
        if kind == "telegram":
            token = self.r.secret(entries, node, path, "bot_token", self._check_token)
            chat_id = self.chat_id(entries, node, path)
            api_url: str | None = TELEGRAM_API
            if "api_url" in entries:
                api_url = self.r.text(entries["api_url"], _child(path, "api_url"), _check_http_url)
            if name is None or token is None or chat_id is None or api_url is None:
                return None
            return TelegramChannel(name, token, chat_id, api_url.rstrip("/"))
        key = "webhook_url" if kind == "slack" else "url"
        url = self.r.secret(entries, node, path, key, _check_http_url)
        if name is None or url is None:
            return None
        return SlackChannel(name, url) if kind == "slack" else WebhookChannel(name, url)

    def _check_type(self, text: str) -> str | None:
        if text in CHANNEL_TYPES:
            return None
        return f"unknown channel type {text!r} ({_did_you_mean(text, CHANNEL_TYPES)})"

    @staticmethod
    def _check_token(text: str) -> str | None:
        if _BOT_TOKEN.fullmatch(text):
            return None
        return f"not a bot token (like 123456:ABC-DEF...) {_NOT_SHOWN}"

    def chat_id(self, entries: dict[str, yaml.Node], node: yaml.Node, path: str) -> str | None:
        if "chat_id" not in entries:
            self.r.report(path, node, "missing required key 'chat_id'")
            return None
        where = _child(path, "chat_id")
        value = self.r.value(entries["chat_id"], where)
        if value is None:
            return None
        data = value.data
        if isinstance(data, bool) or not isinstance(data, int | str) or not str(data).strip():
            self.r.report(
                where,
                entries["chat_id"],
                f"expected a chat id: a number like -1001234567890 or @channelname, "
                f"got {_kind(entries['chat_id'])}",
            )
            return None
        return str(data).strip()

    def route(
        self,
        node: yaml.Node,
        path: str,
        channels: Mapping[str, str],
        targets: Collection[str],
    ) -> Route | None:
        entries = self.r.mapping(node, path, _ROUTE_KEYS, required=("channels",))
        if entries is None:
            return None

        def names(key: str, check: Callable[[str], str | None]) -> tuple[str, ...]:
            if key not in entries:
                return ()
            found = (
                self.r.text(item, item_path, check)
                for item_path, item in self.r.items(entries[key], _child(path, key))
            )
            return tuple(dict.fromkeys(text for text in found if text is not None))

        def one_of(what: str, choices: Collection[str]) -> Callable[[str], str | None]:
            def check(text: str) -> str | None:
                if text in choices:
                    return None
                return f"unknown {what} {text!r} ({_did_you_mean(text, choices)})"

            return check

        def target(text: str) -> str | None:
            if any(ch in text for ch in "*?[") or text in targets:
                return None
            return f"no target is named {text!r} ({_did_you_mean(text, targets)})"

        chosen = names("channels", one_of("channel", channels))
        kinds = names("kinds", one_of("finding kind", [k.value for k in FindingKind]))
        severities = names("severities", one_of("severity", [s.value for s in Severity]))
        patterns = names("targets", target)
        timings: dict[str, float | None] = {"for": None, "repeat_interval": None}
        for key in timings:
            if key in entries:
                timings[key] = self.r.duration(entries[key], _child(path, key), _anything)
        if "channels" in entries and not chosen:
            self.r.report(
                _child(path, "channels"), entries["channels"], "needs at least one channel"
            )
            return None
        return Route(
            channels=chosen,
            kinds=frozenset(FindingKind(k) for k in kinds),
            severities=frozenset(Severity(s) for s in severities),
            targets=patterns,
            for_duration=timings["for"],
            repeat_interval=timings["repeat_interval"],
        )


# ---------------------------------------------------------------------------
# Entry points


def load_settings(path: Path, environ: Mapping[str, str] | None = None) -> Settings:
    """Read and validate a config file; raise :class:`ConfigError` with every problem."""
    path = Path(path)
    reader = _Reader(str(path), path.parent, os.environ if environ is None else environ)
    settings = _load(reader, path)
    if reader.problems:
        raise ConfigError(_finish(reader.problems, reader.secrets))
    assert settings is not None
    return settings


def _load(reader: _Reader, path: Path) -> Settings | None:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        reader.report("", None, f"cannot read the config file: {reason}")
        return None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        # str(exc) quotes the offending source line, which may be a DSN with a password
        mark = exc.problem_mark or exc.context_mark
        words = ", ".join(part for part in (exc.context, exc.problem) if part)
        reader.problems.append(
            ConfigProblem(
                reader.file,
                "",
                None if mark is None else mark.line + 1,
                f"YAML syntax error: {words}",
            )
        )
        return None
    except yaml.YAMLError:
        reader.report("", None, "YAML syntax error")
        return None
    if root is None:
        reader.report("", None, "the file is empty; it needs at least 'targets'")
        return None
    if not isinstance(root, yaml.MappingNode):
        reader.report("", root, f"the top level must be a mapping (key: value), got {_kind(root)}")
        return None
    return _Loader(reader).settings(root, path)


def _finish(problems: list[ConfigProblem], secrets: list[str]) -> list[ConfigProblem]:
    """In file order, and scrubbed of any secret a message might have picked up."""
    scrubbed = [
        replace(problem, message=redact(problem.message, tuple(secrets))) for problem in problems
    ]
    return sorted(scrubbed, key=lambda problem: problem.line or 0)


def settings_from_flags(
    *,
    dsn: str,
    listen: str | None = None,
    interval: float | None = None,
    max_hold: float | None = None,
    orphan_after: float | None = None,
    convoy_waiters: int | None = None,
    state_dir: Path | None = None,
) -> Settings:
    """The zero-config quick start: one target named ``default``."""
    problems: list[ConfigProblem] = []

    def check(flag: str, problem: str | None) -> None:
        if problem is not None:
            problems.append(ConfigProblem(COMMAND_LINE, flag, None, problem))

    def seconds(flag: str, value: float | None, rule: Callable[[float], str | None]) -> None:
        if value is None:
            return
        try:
            parse_duration(value)
        except ValueError as exc:
            check(flag, str(exc))
            return
        check(flag, rule(value))

    check("--dsn", _check_dsn(dsn))
    if listen is not None:
        check("--listen", _check_listen(listen))
    seconds("--interval", interval, _check_interval)
    seconds("--max-hold", max_hold, _positive)
    seconds("--orphan-after", orphan_after, _positive)
    if convoy_waiters is not None:
        check("--convoy-waiters", _check_convoy_waiters(convoy_waiters))
    if state_dir is not None and state_dir.exists() and not state_dir.is_dir():
        check("--state-dir", f"not a directory: {state_dir}")
    if problems:
        raise ConfigError(_finish(problems, [dsn, dsn_password(dsn) or ""]))
    locks = LockSettings()
    locks = replace(
        locks,
        max_hold=locks.max_hold if max_hold is None else float(max_hold),
        orphan_after=locks.orphan_after if orphan_after is None else float(orphan_after),
        convoy_waiters=locks.convoy_waiters if convoy_waiters is None else convoy_waiters,
    )
    target = Target(name=DEFAULT_TARGET, dsn=dsn, locks=locks)
    if interval is not None:
        target = replace(target, interval=float(interval))
    return Settings(
        targets=(target,),
        listen=DEFAULT_LISTEN if listen is None else listen,
        state_dir=state_dir,
    )

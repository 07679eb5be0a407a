"""YAML as plain data that remembers where each value was written.

:class:`Composer` turns composed PyYAML nodes into :class:`YamlMap`,
:class:`YamlList` and scalars. Each mapping and list knows its location (a
dotted path as a tuple: ``("targets", 0, "locks")``), and an :class:`Index`
keeps the line of every value and key and which strings came from ``${VAR}``,
expanded here (``$${`` for a literal ``${``). ``<<`` merge keys are resolved, and
keys written twice are reported.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import Protocol

import yaml

Loc = tuple[str | int, ...]


def dotted(loc: Loc) -> str:
    """
    >>> dotted(("targets", 0, "locks", "named", 2, "key"))
    'targets[0].locks.named[2].key'
    """
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else part
    return text


# ---------------------------------------------------------------------------
# YAML as plain data that knows where it came from


class YamlMap(dict[str, object]):
    """A mapping of the file, at ``loc``."""

    __slots__ = ("loc",)

    def __init__(self, loc: Loc, items: Mapping[str, object] | None = None) -> None:
        super().__init__(items or {})
        self.loc = loc


class YamlList(list[object]):
    __slots__ = ("loc",)

    def __init__(self, loc: Loc, items: list[object]) -> None:
        super().__init__(items)
        self.loc = loc


@dataclass(frozen=True, slots=True)
class _Placeholder:
    words: str

    def __repr__(self) -> str:
        return self.words


NO_VALUE = _Placeholder("nothing")  # `key:` with nothing after it; unlike None, no field takes it
FAILED = _Placeholder("a value already reported")  # every error about it is dropped

_KINDS: tuple[tuple[type, str], ...] = (
    (bool, "true/false"),
    (int, "an integer"),
    (float, "a number"),
    (str, "a string"),
    (date, "a timestamp"),
    (list, "a list"),
    (dict, "a mapping"),
)


def kind(value: object) -> str:
    """What a value read from YAML is, in a message.

    >>> kind(True), kind(3), kind("x"), kind([]), kind(NO_VALUE)
    ('true/false', 'an integer', 'a string', 'a list', 'nothing')
    """
    if isinstance(value, _Placeholder):
        return value.words
    return next((words for cls, words in _KINDS if isinstance(value, cls)), "a value")


@dataclass(slots=True)
class Index:
    """Where each value of the file was written, and which came from the environment."""

    lines: dict[Loc, int] = field(default_factory=dict)
    key_lines: dict[Loc, int] = field(default_factory=dict)
    # the values that came from the environment, with the references: "${A}, ${B}"
    from_environment: dict[Loc, tuple[str, str]] = field(default_factory=dict)

    def line(self, loc: Loc, *, key: bool = False) -> int | None:
        if key and loc in self.key_lines:
            return self.key_lines[loc]
        while loc not in self.lines and loc:
            loc = loc[:-1]
        return self.lines.get(loc)


_ENV_REFERENCE = re.compile(r"\$(\$\{)|\$\{([^}]*)\}|\$\{")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TAG = "tag:yaml.org,2002:"


def subset(raw: YamlMap, keys: Collection[str]) -> YamlMap:
    """The entries of ``raw`` that belong to a part validated on its own, at the same place."""
    return YamlMap(raw.loc, {key: value for key, value in raw.items() if key in keys})


def entries(raw: object) -> Iterator[tuple[Loc, object]]:
    """A list's items with their locations; nothing when ``raw`` is no list."""
    if isinstance(raw, YamlList):
        for i, item in enumerate(raw):
            yield (*raw.loc, i), item


class Report(Protocol):
    def __call__(self, loc: Loc, message: str, *, line: yaml.Node | None = None) -> None: ...


class Composer:
    """Composed YAML nodes -> YamlMap, YamlList and scalars, each with its line."""

    def __init__(self, index: Index, environ: Mapping[str, str], report: Report) -> None:
        self.index = index
        self.environ = environ
        self.report = report
        # only its constructor is used: for scalars, and to resolve `<<` merge keys
        self._loader = yaml.SafeLoader("")
        self._flattened: set[int] = set()
        self._open: set[int] = set()  # nodes being converted: an alias to one is a loop

    def convert(self, node: yaml.Node, loc: Loc) -> object:
        self.index.lines[loc] = node.start_mark.line + 1
        if id(node) in self._open:
            self.report(loc, "an alias that refers to itself")
            return FAILED
        self._open.add(id(node))
        try:
            return self._convert(node, loc)
        finally:
            self._open.discard(id(node))

    def _convert(self, node: yaml.Node, loc: Loc) -> object:
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node, loc)
        if isinstance(node, yaml.SequenceNode) and node.tag == _TAG + "seq":
            return YamlList(
                loc, [self.convert(item, (*loc, i)) for i, item in enumerate(node.value)]
            )
        if isinstance(node, yaml.MappingNode) and node.tag == _TAG + "map":
            return self._mapping(node, loc)
        return _Placeholder(f"a {node.tag} value")

    def _scalar(self, node: yaml.ScalarNode, loc: Loc) -> object:
        if node.tag == _TAG + "null":
            return NO_VALUE
        try:
            value = self._loader.construct_object(node)
        except yaml.MarkedYAMLError as exc:
            self.report(loc, f"cannot read this value: {exc.problem}")
            return FAILED
        return self._expand(value, loc) if isinstance(value, str) else value

    def _expand(self, text: str, loc: Loc) -> object:
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
            self.report(loc, message)
        if missing:
            return FAILED
        if used:
            self.index.from_environment[loc] = (expanded, ", ".join(used))
        return expanded

    def _mapping(self, node: yaml.MappingNode, loc: Loc) -> object:
        if not self._flatten(node, loc):
            return FAILED
        result = YamlMap(loc)
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != _TAG + "str":
                got = kind(
                    self._scalar(key_node, loc) if isinstance(key_node, yaml.ScalarNode) else []
                )
                self.report(loc, f"keys must be strings, got {got}", line=key_node)
                continue
            child = (*loc, str(key_node.value))
            self.index.key_lines[child] = key_node.start_mark.line + 1
            result[str(key_node.value)] = self.convert(value_node, child)
        return result

    def _flatten(self, node: yaml.MappingNode, loc: Loc) -> bool:
        """Resolve ``<<`` merges; report keys written twice (PyYAML keeps the last silently)."""
        if id(node) in self._flattened:
            return True
        self._flattened.add(id(node))
        seen: set[object] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != _TAG + "merge":
                if key_node.value in seen:
                    self.report(
                        (*loc, str(key_node.value)), "key given more than once", line=key_node
                    )
                seen.add(key_node.value)
        try:
            self._loader.flatten_mapping(node)
        except yaml.MarkedYAMLError as exc:
            self.report(loc, f"cannot merge: {exc.problem}")
            return False
        # flattening puts merged entries first, so a key written here still wins
        return True

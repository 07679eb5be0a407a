"""The YAML toolkit of the config loader: a file in, problems or a validated value out.

A config file is composed (:mod:`~lockwatch.config.yamldata`) into plain data
that remembers, for every dotted path, the line it came from and whether it
came from ``${VAR}``. pydantic then validates that data into the settings
dataclasses, whose fields are the keys (:mod:`~lockwatch.config.keys`); each mapping
of the file passes through :meth:`Reading.section`, which refuses unknown keys
(with a did-you-mean), reads ``*_file`` secrets and turns pydantic's errors into
:class:`ConfigProblem` s: ``file:line: dotted.path: what is wrong``.

Every problem in a file is collected in one pass, so an operator fixes a config
in one edit instead of one restart per typo. Secrets stay out of every message:
a DSN is never echoed, nor is any value that came from the environment or a
``*_file``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

from lockwatch.config.keys import Key, adapter, field_key, file_keys, keys_of
from lockwatch.config.syntax import describe_syntax_error
from lockwatch.config.yamldata import (
    FAILED,
    NO_VALUE,
    Composer,
    Index,
    Loc,
    YamlMap,
    dotted,
    kind,
)
from lockwatch.settings.fields import UNIQUE, FilePath, Secret, did_you_mean
from lockwatch.util.secrets import redact

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


def finished(problems: Collection[ConfigProblem], secrets: Collection[str]) -> ConfigError:
    """The problems in file order, scrubbed of any secret a message might have picked up."""
    scrubbed = [replace(p, message=redact(p.message, tuple(secrets))) for p in problems]
    return ConfigError(sorted(scrubbed, key=lambda problem: problem.line or 0))


# ---------------------------------------------------------------------------
# pydantic's errors in the file's words

_LIST_ERRORS = frozenset({"list_type", "tuple_type", "set_type", "frozen_set_type"})
_MAPPING_ERRORS = frozenset({"mapping_type", "dataclass_type", "dataclass_exact_type", "dict_type"})
# errors of converters, which see a list or a mapping as a wrong single value
_VALUE_ERRORS = frozenset({"value_error", "wrong_type"})


def message_of(error: ErrorDetails) -> str:
    """What is wrong, for one error of pydantic's (not 'missing': that names its parent)."""
    value, what = error["input"], error["type"]
    if what in _LIST_ERRORS or what in _MAPPING_ERRORS:
        expected = "a list" if what in _LIST_ERRORS else "a mapping (key: value)"
        return f"expected {expected}, got {kind(value)}"
    if value is NO_VALUE:
        return "has no value"
    if what in _VALUE_ERRORS and isinstance(value, list | dict):
        return f"expected a single value, got {kind(value)}"
    if what == "wrong_type":
        return f"{error['msg']}, got {kind(value)}"
    # a converter's ValueError, or the words of a check
    return str(error.get("ctx", {}).get("error", error["msg"]))


def _missing(section: type | None, key: str) -> str:
    keys = keys_of(section) if section is not None else ()
    file_key = next((k.file_key for k in keys if k.key == key), None)
    also = f" (or {file_key!r})" if file_key else ""
    return f"missing required key {key!r}{also}"


def _reported() -> PydanticCustomError:
    """Fails a section whose problems are already recorded: its parent adds none."""
    return PydanticCustomError("reported", "reported")


# ---------------------------------------------------------------------------
# Reading one file


class Shape:
    """How the YAML of one section differs from its dataclass; by default, not at all.

    The loader's section modules subclass it; :meth:`Reading.section` calls it.
    """

    def keys(self, reading: Reading, cls: type[Any], raw: YamlMap) -> Collection[str]:
        return file_keys(cls)

    def before(self, reading: Reading, raw: YamlMap, data: dict[str, object]) -> dict[str, object]:
        """The mapping as the dataclass takes it; problems found here are reported."""
        return data

    def after(self, reading: Reading, raw: YamlMap, value: Any) -> Any:
        """Checks that need the validated value (and a last adjustment of it)."""
        return value


_PLAIN = Shape()


class Reading:
    """One reading of one config file: the data, where it came from, and its problems."""

    def __init__(
        self, path: Path, environ: Mapping[str, str] | None, shapes: Mapping[type, Shape]
    ) -> None:
        self.source = path
        self.file = str(path)
        self.base_dir = path.parent  # relative paths in the file are meant from here
        self.environ = os.environ if environ is None else environ
        self.shapes = shapes
        self.index = Index()
        self.problems: list[ConfigProblem] = []
        self.secrets: list[str] = []
        self._names: dict[Loc, dict[str, Loc]] = {}

    # -- problems ----------------------------------------------------------

    def report(
        self, loc: Loc, message: str, *, key: bool = False, line: yaml.Node | None = None
    ) -> None:
        at = self.index.line(loc, key=key) if line is None else line.start_mark.line + 1
        if loc in self.index.from_environment:  # a message may quote the value: never this one
            value, references = self.index.from_environment[loc]
            message = message.replace(repr(value), f"(the value of {references}, not shown)")
        self.problems.append(ConfigProblem(self.file, dotted(loc), at, message))

    def report_errors(
        self,
        exc: ValidationError,
        base: Loc,
        cls: type[Any] | None = None,
        renamed: Mapping[str, str] | None = None,
    ) -> None:
        """Record pydantic's errors about the value at ``base`` (a mapping of ``cls``)."""
        renamed = renamed or {}
        for error in exc.errors():
            if error["type"] == "reported" or error["input"] is FAILED:
                continue
            loc = tuple(error["loc"])
            if loc and isinstance(loc[0], str) and loc[0] in renamed:
                loc = (renamed[loc[0]], *loc[1:])  # a secret read from <key>_file is reported there
            if error["type"] == "missing":
                self.report((*base, *loc[:-1]), _missing(cls, str(loc[-1])))
                continue
            where = (*base, *loc)
            message = message_of(error)
            if error["type"] == "already_listed":
                first = (*where[:-1], error.get("ctx", {})["first"])
                message = f"{error.get('ctx', {})['shown']} is already listed at {dotted(first)}"
            self.report(where, message)

    def error(self) -> ConfigError:
        return finished(self.problems, self.secrets)

    # -- reading the file --------------------------------------------------

    def document(self) -> YamlMap | None:
        """The file as data, or None after reporting why it has none."""
        try:
            text = self.source.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            self.report((), f"cannot read the config file: {_unreadable(exc)}")
            return None
        try:
            root = yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.YAMLError as exc:
            line, words = describe_syntax_error(exc, text)
            self.problems.append(ConfigProblem(self.file, "", line, f"YAML syntax error: {words}"))
            return None
        if root is None:
            self.report((), "the file is empty; it needs at least 'targets'")
            return None
        data = Composer(self.index, self.environ, self.report).convert(root, ())
        if not isinstance(data, YamlMap):
            if data is not FAILED:
                self.report((), f"the top level must be a mapping (key: value), got {kind(data)}")
            return None
        return data

    # -- validating parts ----------------------------------------------------

    def value(self, annotation: Any, raw: object, loc: Loc) -> Any:
        """``raw`` validated as ``annotation``; FAILED after reporting why not."""
        try:
            return adapter(annotation).validate_python(raw, context=self)
        except ValidationError as exc:
            self.report_errors(exc, loc)
            return FAILED

    def field(self, cls: type[Any], name: str, raw: object, loc: Loc) -> Any:
        """``raw`` validated as the field ``name`` of ``cls`` takes it."""
        key = field_key(cls, name)
        if key.secret is not None:
            self._remember(raw, key.secret)
        return self.value(key.annotation, raw, loc)

    @staticmethod
    def peek(annotation: Any, raw: object) -> Any:
        """``raw`` validated as ``annotation``, or None; nothing is reported."""
        try:
            return adapter(annotation).validate_python(raw)
        except ValidationError:
            return None

    def known(self, raw: YamlMap, allowed: Collection[str]) -> dict[str, object]:
        """The entries whose keys are allowed; each other key is reported."""
        for key in raw:
            if key not in allowed:
                message = f"unknown key ({did_you_mean(key, allowed)})"
                self.report((*raw.loc, key), message, key=True)
        return {key: value for key, value in raw.items() if key in allowed}

    def names(self, loc: Loc) -> dict[str, Loc]:
        """The names claimed in the list at ``loc``, each with the entry that claimed it."""
        return self._names.setdefault(loc, {})

    def claim(self, raw: YamlMap, key: Key) -> None:
        """Report ``key`` when an earlier entry of the same list has the same value."""
        name = self.peek(key.annotation, raw.get(key.key))
        if not isinstance(name, str):
            return
        taken = self.names(raw.loc[:-1])
        if name in taken:
            self.report((*raw.loc, key.key), f"{name!r} is already used at {dotted(taken[name])}")
        else:
            taken[name] = raw.loc

    # -- a section -----------------------------------------------------------

    def section(self, cls: type[Any], raw: object, handler: Callable[[object], Any]) -> Any:
        """Validate one mapping of the file as ``cls`` (pydantic calls this)."""
        if isinstance(raw, cls):  # validated already, e.g. inherited from defaults
            return raw
        if not isinstance(raw, YamlMap):
            raise PydanticCustomError("mapping_type", "expected a mapping")
        shape = self.shapes.get(cls, _PLAIN)
        before = len(self.problems)
        data = self.known(raw, shape.keys(self, cls, raw))
        for key in keys_of(cls):
            if key.marked(UNIQUE):
                self.claim(raw, key)
        data = shape.before(self, raw, data)
        renamed = self._secrets(cls, raw, data)
        try:
            value = handler(data)
        except ValidationError as exc:
            self.report_errors(exc, raw.loc, cls, renamed)
            raise _reported() from None
        if len(self.problems) == before:
            value = shape.after(self, raw, value)
        if len(self.problems) > before:
            raise _reported()
        return value

    def _secrets(self, cls: type[Any], raw: YamlMap, data: dict[str, object]) -> dict[str, str]:
        """Read each ``<key>_file``, refuse secrets written in the file, and remember
        every secret so no message shows it. Returns the keys whose value was read
        from a file, so problems with the value are reported at the file's key."""
        renamed = {}
        for key in keys_of(cls):
            secret = key.secret
            if secret is None:
                continue
            if key.file_key is not None and key.file_key in data:
                if key.key in data:
                    self.report(raw.loc, f"set either {key.key!r} or {key.file_key!r}, not both")
                    data[key.key] = FAILED
                    del data[key.file_key]
                    continue
                loc = (*raw.loc, key.file_key)
                data[key.key] = self._read_secret_file(data.pop(key.file_key), loc)
                renamed[key.key] = key.file_key
            value = data.get(key.key)
            self._remember(value, secret)
            loc = (*raw.loc, key.key)
            written = key.key not in renamed and loc not in self.index.from_environment
            if isinstance(value, str) and written and not secret.literal:
                self.report(
                    loc,
                    f"keep the secret out of the config file: use {key.file_key}, "
                    f"or take it from the environment with ${{VAR}}",
                )
                data[key.key] = FAILED
        return renamed

    def _remember(self, value: object, secret: Secret) -> None:
        if isinstance(value, str):
            self.secrets.append(value)
            part = secret.part(value) if secret.part else None
            if part:
                self.secrets.append(part)

    def _read_secret_file(self, raw: object, loc: Loc) -> object:
        file = self.value(FilePath, raw, loc)
        if file is FAILED:
            return FAILED
        try:
            content = file.read_text(encoding="utf-8").rstrip()
        except FileNotFoundError:
            self.report(loc, f"no such file: {file}")
            return FAILED
        except (OSError, UnicodeDecodeError) as exc:
            self.report(loc, f"cannot read {file}: {_unreadable(exc)}")
            return FAILED
        if not content:
            self.report(loc, f"file is empty: {file}")
            return FAILED
        return content


def _unreadable(exc: OSError | UnicodeDecodeError) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"

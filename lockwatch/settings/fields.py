"""What a setting's value must be, declared once, on its field.

The settings dataclasses declare each field as ``Annotated[type, ...]`` with
the converters and checks below, which pydantic applies, and with markers
(:data:`INTERNAL`, :class:`Secret`, :data:`UNIQUE`, :data:`INHERITED`) that
say how the field is spelled in a config file, which :mod:`lockwatch.config`
reads. The config file, the command-line flags and anything else validating
settings therefore apply the same rules and say the same words.

A converter says what it expected (:func:`wrong_type`); the config reader adds
what it got, in YAML's words, and hides any value that came from the
environment or a file.
"""

from __future__ import annotations

import difflib
import enum
import math
import re
from collections.abc import Callable, Collection, Hashable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any, ClassVar, Protocol, TypeVar, runtime_checkable

from pydantic import (
    AfterValidator,
    ConfigDict,
    ModelWrapValidatorHandler,
    PlainValidator,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from lockwatch.util.secrets import misread_authority

_T = TypeVar("_T")
_E = TypeVar("_E", bound=enum.Enum)

# ---------------------------------------------------------------------------
# Markers: how a field appears in a config file


@dataclass(frozen=True, slots=True)
class Marker:
    name: str


INTERNAL = Marker("not a key of the config file: the loader fills it in")
UNIQUE = Marker("no two entries of one list may have the same value")
INHERITED = Marker("may also be set under defaults:, for every target")


@dataclass(frozen=True, slots=True)
class Secret:
    """A value that no message may show.

    ``from_file``: it may instead be read from the file named by ``<key>_file``.
    ``literal``: it may be written in the config file itself (a DSN may: its
    password can come from ``${VAR}``); otherwise only ``${VAR}`` or the file.
    ``part``: a piece of it that may show up on its own, e.g. a password.
    """

    from_file: bool = True
    literal: bool = True
    part: Callable[[str], str | None] | None = None


# ---------------------------------------------------------------------------
# Words


def did_you_mean(word: str, choices: Collection[str]) -> str:
    """
    >>> did_you_mean("max_hlod", ["max_hold", "top_n"])
    "did you mean 'max_hold'?"
    >>> did_you_mean("colour", ["listen", "targets"])
    'expected one of: listen, targets'
    """
    close = difflib.get_close_matches(word, list(choices), n=1)
    if close:
        return f"did you mean {close[0]!r}?"
    return "expected one of: " + ", ".join(sorted(choices))


def wrong_type(expected: str) -> PydanticCustomError:
    """The error for a value of the wrong kind; the reader adds what it got."""
    return PydanticCustomError("wrong_type", "expected {expected}", {"expected": expected})


def problem_at(loc: tuple[str | int, ...], message: str, value: object = None) -> ValidationError:
    """An error about one field, raised by a check of the whole dataclass."""
    error = InitErrorDetails(type=PydanticCustomError("problem", message), loc=loc, input=value)
    return ValidationError.from_exception_data("settings", [error])


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
# Converters: a value as read from YAML (or given by a caller) -> its type


def to_seconds(value: object) -> float:
    if isinstance(value, str | int | float):
        return parse_duration(value)
    raise ValueError(f"not a duration: {value!r} ({_DURATION_HINT})")


def to_whole(value: object) -> int:
    """
    >>> to_whole("42"), to_whole(7)
    (42, 7)
    """
    # quoted and ${VAR} numbers are fine; true/false and 2.5 are mistakes
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"not a whole number: {value!r}")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"not a whole number: {value!r}") from None


def to_number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"not a number: {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"not a number: {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"not a number: {value!r}")
    return number


def to_text(value: object) -> str:
    if not isinstance(value, str):
        raise wrong_type("a string")
    if not value:
        raise ValueError("is empty")
    return value


def to_flag(value: object) -> bool:
    # strictly true or false: "yes" from ${VAR} is as much a mistake as `ignore: maybe`
    if not isinstance(value, bool):
        raise wrong_type("true or false")
    return value


def to_path(value: object, info: ValidationInfo) -> Path:
    """A path; relative ones are meant from the config file, not the daemon's cwd."""
    if isinstance(value, Path):
        return value
    text = to_text(value)
    base = getattr(info.context, "base_dir", None)
    return Path(text) if base is None else Path(base) / text


def one_of(choices: type[_E], what: str) -> PlainValidator:
    """An enum member by its value, with a did-you-mean for a near miss."""
    values = [str(member.value) for member in choices]

    def convert(value: object) -> _E:
        if isinstance(value, choices):
            return value
        text = to_text(value)
        if text not in values:
            raise ValueError(f"unknown {what} {text!r} ({did_you_mean(text, values)})")
        return choices(text)

    return PlainValidator(convert)


# ---------------------------------------------------------------------------
# Checks: a message, or None when the value is fine


def check(rule: Callable[[Any], str | None]) -> AfterValidator:
    def run(value: _T) -> _T:
        problem = rule(value)
        if problem is not None:
            raise PydanticCustomError("problem", problem)
        return value

    return AfterValidator(run)


def at_least(minimum: float, shown: str | None = None) -> AfterValidator:
    words = f"must be at least {minimum if shown is None else shown}"
    return check(lambda value: None if value >= minimum else words)


def at_most(maximum: float) -> AfterValidator:
    return check(lambda value: None if value <= maximum else f"must be at most {maximum}")


POSITIVE = check(lambda value: None if value > 0 else "must be greater than 0")


def not_empty(message: str) -> AfterValidator:
    return check(lambda items: None if items else message)


def unique_items(shown: Callable[[Any], str]) -> AfterValidator:
    """A list without repeats; a repeated item is an error at its own index."""

    def run(items: tuple[Hashable, ...]) -> tuple[Hashable, ...]:
        first: dict[Hashable, int] = {}
        errors = []
        for i, item in enumerate(items):
            if item in first:
                error = PydanticCustomError(
                    "already_listed",
                    "{shown} is already listed at [{first}]",
                    {"shown": shown(item), "first": first[item]},
                )
                errors.append(InitErrorDetails(type=error, loc=(i,), input=item))
            first.setdefault(item, i)
        if errors:
            raise ValidationError.from_exception_data("settings", errors)
        return items

    return AfterValidator(run)


# a name given twice in a list is meant once
distinct = AfterValidator(lambda items: tuple(dict.fromkeys(items)))

_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def check_name(name: str) -> str | None:
    if _NAME.fullmatch(name):
        return None
    return f"not a valid name: {name!r} (use letters, digits, '_', '.', '-')"


_SSLMODES = frozenset({"disable", "allow", "prefer", "require", "verify-ca", "verify-full"})
_DSN_WITHHELD = "(the DSN is not shown: it may hold a password)"
_DSN_PARSE_ERRORS = (
    ("invalid connection option", "has an unknown connection option"),
    ('missing "="', "has a word without '=' (quote values with spaces: key='a b')"),
    ("unterminated quoted string", "has an unterminated quoted string"),
    ("URI", "not a valid postgresql:// URI"),
)


def check_dsn(dsn: str) -> str | None:
    """What is wrong with a DSN, in words that never quote it: it may hold a password.

    libpq's own messages quote the string (all of it, for a bad URI), so they are
    classified rather than passed on.

    >>> check_dsn("postgresql://app:hunter2@[::1/x")
    'not a valid postgresql:// URI (the DSN is not shown: it may hold a password)'
    """
    if not dsn.strip():
        return "is empty"
    # Here, not at the top: commands that read a config without its DSNs
    # (``lockwatch incidents``) start without psycopg (issue 32).
    import psycopg.conninfo

    try:
        parts = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        detail = str(exc)
        what = next(
            (words for clue, words in _DSN_PARSE_ERRORS if clue in detail),
            "cannot be parsed as a connection string",
        )
        return f"{what} {_DSN_WITHHELD}"
    if misread_authority(dsn):
        return (
            "has an '@' in its user or password that is not percent-encoded, so the "
            "password's tail would be read as the host name: percent-encode the password "
            f"('@' as %40) {_DSN_WITHHELD}"
        )
    for port in str(parts.get("port") or "").split(","):
        if port and not (port.isdigit() and 1 <= int(port) <= 65535):
            return f"has a port that is not a number from 1 to 65535 {_DSN_WITHHELD}"
    sslmode = parts.get("sslmode")
    if sslmode is not None and sslmode not in _SSLMODES:
        return f"has an sslmode other than {', '.join(sorted(_SSLMODES))} {_DSN_WITHHELD}"
    return None


# ---------------------------------------------------------------------------
# The field types

Seconds = Annotated[float, PlainValidator(to_seconds)]
PositiveSeconds = Annotated[Seconds, POSITIVE]
MIN_INTERVAL = 0.1
Interval = Annotated[Seconds, at_least(MIN_INTERVAL, "100ms")]  # how often something is polled
Whole = Annotated[int, PlainValidator(to_whole)]
Number = Annotated[float, PlainValidator(to_number)]
Text = Annotated[str, PlainValidator(to_text)]
Flag = Annotated[bool, PlainValidator(to_flag)]
FilePath = Annotated[Path, PlainValidator(to_path)]
# names go into metric labels and URLs
Name = Annotated[Text, check(check_name)]
Dsn = Annotated[Text, check(check_dsn)]


class Learned(enum.StrEnum):
    AUTO = (
        "auto"  # the budget is learned from the thing's own history (a lock's holds, a job's runs)
    )


def to_budget(value: object) -> float | Learned:
    """
    >>> to_budget("auto"), to_budget("2m")
    (<Learned.AUTO: 'auto'>, 120.0)
    """
    if value == Learned.AUTO.value:
        return Learned.AUTO
    seconds = to_seconds(value)
    if seconds <= 0:
        raise ValueError("must be greater than 0")
    return seconds


def fixed(budget: float | Learned, default: float) -> float:
    """The static budget behind ``budget``: itself, or ``default`` for auto
    (what applies while a key's history is still being learned)."""
    return default if isinstance(budget, Learned) else budget


# Seconds, or ``auto``: learned from history.
Budget = Annotated[float | Learned, PlainValidator(to_budget)]


# ---------------------------------------------------------------------------
# Sections: the dataclasses a config file fills


@runtime_checkable
class SectionReader(Protocol):
    """What validates a section of a config file (:class:`lockwatch.config.reader.Reading`)."""

    def section(self, cls: type[Any], raw: object, handler: Callable[[object], Any]) -> Any: ...


class Section:
    """Base of the settings dataclasses that are a mapping in a config file.

    pydantic validates them (unknown keys are refused); when the validation
    context is a :class:`SectionReader`, it handles each mapping: the spelling
    of keys, secrets, did-you-mean, line numbers.
    """

    __slots__ = ()
    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(extra="forbid")

    @model_validator(mode="wrap")
    @classmethod
    def _read_section(
        cls, raw: object, handler: ModelWrapValidatorHandler[Any], info: ValidationInfo
    ) -> Any:
        if isinstance(info.context, SectionReader):
            return info.context.section(cls, raw, handler)
        return handler(raw)

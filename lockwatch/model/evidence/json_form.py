"""Evidence as JSON and back: the one encoding the API, the state file, the
notifier's outbox and the status page share.

A dataclass is an object of its fields, in their order; tuples are lists,
enums their values, datetimes ISO 8601 to the microsecond. Reading is strict:
an object must have exactly its class's fields (one with a default may be
missing), and every value its field's type.
"""

from __future__ import annotations

import enum
import functools
import types
import typing
from dataclasses import MISSING, fields, is_dataclass
from datetime import datetime
from typing import TYPE_CHECKING, TypeAlias, TypeVar, cast

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
JsonObject: TypeAlias = "dict[str, JsonValue]"

T = TypeVar("T")


class JsonShapeError(ValueError):
    """JSON that is not what the class it was read as makes of itself."""


def object_json(value: DataclassInstance) -> JsonObject:
    """A dataclass as a JSON object of its fields.

    >>> from lockwatch.model.evidence import OverflowEvidence
    >>> object_json(OverflowEvidence(count=2, locks=("app/42", "app/7"), cap=100))
    {'count': 2, 'locks': ['app/42', 'app/7'], 'cap': 100, 'holders': []}
    """
    return {field.name: to_json(getattr(value, field.name)) for field in fields(value)}


def to_json(value: object) -> JsonValue:
    if isinstance(value, enum.Enum):
        return to_json(value.value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, tuple | list):
        return [to_json(item) for item in value]
    if is_dataclass(value) and not isinstance(value, type):
        return object_json(value)
    raise TypeError(f"evidence holds a {type(value).__name__}, which JSON cannot carry")


def from_json(cls: type[T], data: object) -> T:
    """The ``cls`` that ``to_json`` made ``data`` of; JsonShapeError when it is not one."""
    return cast(T, _read(cls, data))


def _read(hint: object, data: object) -> object:
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        return _read_union(typing.get_args(hint), data)
    if origin is tuple:
        item, _ = typing.get_args(hint)  # every tuple of evidence is tuple[X, ...]
        if not isinstance(data, list):
            raise JsonShapeError(f"{_shown(data)} is not a list")
        return tuple(_read(item, value) for value in data)
    if isinstance(hint, type) and is_dataclass(hint):
        return _read_object(hint, data)
    return _read_scalar(hint, data)


def _read_union(arms: tuple[object, ...], data: object) -> object:
    for arm in arms:
        try:
            return _read(arm, data)
        except JsonShapeError:
            continue
    raise JsonShapeError(f"{_shown(data)} is none of {arms}")


def _read_scalar(hint: object, data: object) -> object:
    if hint is type(None) and data is None:
        return None
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(data)
        except ValueError:
            raise JsonShapeError(f"{_shown(data)} is no {hint.__name__}") from None
    if hint is datetime and isinstance(data, str):
        try:
            return datetime.fromisoformat(data)
        except ValueError:
            raise JsonShapeError(f"{_shown(data)} is no moment") from None
    # JSON has one kind of number: an integral float comes back as an int
    if hint is float and isinstance(data, int | float) and not isinstance(data, bool):
        return float(data)
    if hint in (str, int, bool) and type(data) is hint:
        return data
    raise JsonShapeError(f"{_shown(data)} is no {hint}")


def _read_object(cls: type[DataclassInstance], data: object) -> object:
    if not isinstance(data, dict):
        raise JsonShapeError(f"{_shown(data)} is not a {cls.__name__} object")
    hints, required = _shape(cls)
    if not required <= data.keys() <= hints.keys():
        raise JsonShapeError(f"{sorted(data)} are not the fields of {cls.__name__}")
    return cls(**{name: _read(hints[name], value) for name, value in data.items()})


def _shown(data: object) -> str:
    """``data`` for an error message: a value itself, a container by its type alone."""
    if isinstance(data, dict | list):
        return f"a JSON {'object' if isinstance(data, dict) else 'array'}"
    return repr(data)[:80]


@functools.cache
def _shape(cls: type[DataclassInstance]) -> tuple[dict[str, object], frozenset[str]]:
    """A dataclass's field types, and the fields without a default."""
    resolved = typing.get_type_hints(cls)
    hints = {field.name: resolved[field.name] for field in fields(cls)}
    required = frozenset(
        field.name
        for field in fields(cls)
        if field.default is MISSING and field.default_factory is MISSING
    )
    return hints, required

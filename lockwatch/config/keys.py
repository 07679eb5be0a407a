"""The keys of a config section, read off its settings dataclass.

A key is a field of the dataclass: by its alias if it has one (``for``,
``allowed_holders``), absent when the field is INTERNAL, and followed by
``<key>_file`` when the field is a :class:`~lockwatch.settings.fields.Secret`
that may come from a file. Nothing else lists them.
"""

from __future__ import annotations

import functools
import typing
from dataclasses import dataclass, fields
from typing import Annotated, Any

from pydantic import TypeAdapter
from pydantic.fields import FieldInfo

from lockwatch.settings.fields import INTERNAL, Marker, Secret


@dataclass(frozen=True, slots=True)
class Key:
    """One field of a section as the config file spells it."""

    name: str  # the dataclass field
    key: str  # the YAML key: the field's alias, or its name
    annotation: Any
    markers: tuple[object, ...]
    default: object  # dataclasses.MISSING when the key is required

    @property
    def secret(self) -> Secret | None:
        return next((m for m in self.markers if isinstance(m, Secret)), None)

    @property
    def file_key(self) -> str | None:
        secret = self.secret
        return f"{self.key}_file" if secret is not None and secret.from_file else None

    def marked(self, marker: Marker) -> bool:
        return marker in self.markers

    @property
    def adapter(self) -> TypeAdapter[Any]:
        return adapter(self.annotation)


_KEYS: dict[type, tuple[Key, ...]] = {}


def keys_of(cls: type) -> tuple[Key, ...]:
    """The fields of a settings dataclass with their YAML keys, in field order."""
    if cls not in _KEYS:
        _KEYS[cls] = _read_keys(cls)
    return _KEYS[cls]


def _read_keys(cls: type) -> tuple[Key, ...]:
    hints = typing.get_type_hints(cls, include_extras=True)
    found = []
    for each in fields(cls):
        annotation = hints[each.name]
        markers = tuple(getattr(annotation, "__metadata__", ()))
        alias = next((m.alias for m in markers if isinstance(m, FieldInfo) and m.alias), None)
        if markers:  # the value's type and checks, without what only a field can have
            kept = tuple(m for m in markers if not isinstance(m, FieldInfo))
            annotation = (
                Annotated[(annotation.__origin__, *kept)] if kept else annotation.__origin__
            )
        found.append(Key(each.name, alias or each.name, annotation, markers, each.default))
    return tuple(found)


def file_keys(cls: type) -> tuple[str, ...]:
    """The keys a mapping of ``cls`` takes: its fields but the internal ones, by
    their YAML names, each secret that may come from a file followed by ``<key>_file``.
    """
    found: list[str] = []
    for key in keys_of(cls):
        if not key.marked(INTERNAL):
            found += [key.key] if key.file_key is None else [key.key, key.file_key]
    return tuple(found)


def field_key(cls: type, name: str) -> Key:
    return next(key for key in keys_of(cls) if key.name == name)


def values_of(value: object) -> dict[str, object]:
    """A validated section as a mapping of the file would give it, e.g. to inherit from."""
    return {key.key: getattr(value, key.name) for key in keys_of(type(value))}


@functools.cache
def adapter(annotation: Any) -> TypeAdapter[Any]:
    return TypeAdapter(annotation)

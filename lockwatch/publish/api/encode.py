"""What every API document shares: board views in, JSON bytes out."""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from lockwatch.state.board import Board
from lockwatch.state.target_view import TargetView
from lockwatch.text import iso_utc, printable


def _views(board_or_views: Board | Iterable[TargetView]) -> tuple[TargetView, ...]:
    if isinstance(board_or_views, Board):
        return board_or_views.views()
    return tuple(board_or_views)


def json_safe(value: Any) -> Any:  # noqa: PLR0911 (one return per JSON type reads best)
    """``value`` with everything JSON cannot carry faithfully made plain: lone
    surrogates spelt out, NaN and infinities as null, datetimes in ISO 8601.

    >>> json_safe({"a": (1.5, float("nan")), "b": "x\\udc80"})
    {'a': [1.5, None], 'b': 'x\\\\udc80'}
    """
    if isinstance(value, enum.Enum):
        return json_safe(value.value)
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, bool | int) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, datetime):
        return iso_utc(value)
    if isinstance(value, Mapping):
        return {printable(str(k)): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [json_safe(v) for v in value]
    return printable(str(value))


def render_json(document: Mapping[str, Any] | list[Any]) -> bytes:
    """A document as the API serves it; ``json_safe`` documents always encode."""
    return json.dumps(document, ensure_ascii=False, allow_nan=False).encode("utf-8")

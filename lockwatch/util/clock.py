"""The wall clock, in one place: everything that stamps a moment takes a
``Clock`` and defaults to ``utc_now``, so tests pin the time by passing one."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """Now, aware, in UTC."""
    return datetime.now(UTC)

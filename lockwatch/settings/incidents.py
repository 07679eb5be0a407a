"""Incidents: where their runbook links point, and how long resolved ones are kept."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Annotated

from lockwatch.settings.fields import (
    PositiveSeconds,
    Seconds,
    Section,
    Text,
    Whole,
    at_least,
    check,
    one_of,
)

DEFAULT_RETENTION = 14 * 86400.0  # seconds a resolved incident is kept
DEFAULT_REOPEN_GRACE = 600.0  # seconds after it resolved that its root reopens an incident


class HistoryStore(enum.StrEnum):
    STATE_DIR = "state_dir"  # a file in the state dir (nothing without one)
    PINGS = "pings"  # the PostgreSQL store pings use (pings.dsn), shared by instances


def _check_url(url: str) -> str | None:
    if url.startswith(("https://", "http://")) and "#" not in url:
        return None
    return "must be an http(s) URL without a #fragment (each kind's anchor is added)"


@dataclass(frozen=True, slots=True)
class IncidentSettings(Section):
    # None: the runbooks lockwatch serves itself, at <external_url>/runbooks
    runbook_base_url: Annotated[Text | None, check(_check_url)] = None
    retention: PositiveSeconds = DEFAULT_RETENTION  # seconds resolved incidents are kept
    max_kept: Annotated[Whole, at_least(1)] = 1000  # resolved incidents kept at most
    history: Annotated[HistoryStore, one_of(HistoryStore, "incident history store")] = (
        HistoryStore.STATE_DIR
    )
    # A root back within this long after its incident resolved reopens it
    # (flapping: one incident, one message); 0: each return is a new incident.
    reopen_grace: Seconds = DEFAULT_REOPEN_GRACE

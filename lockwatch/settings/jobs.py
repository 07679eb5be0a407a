"""Jobs lockwatch follows, and where pinged runs are kept."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import Field

from lockwatch.settings.fields import (
    UNIQUE,
    Budget,
    Dsn,
    Name,
    Number,
    PositiveSeconds,
    Secret,
    Section,
    Text,
    Whole,
    at_least,
    check,
)
from lockwatch.settings.schedule import Schedule

_TOKEN_MIN = 16
_TABLE = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def _check_token(token: str) -> str | None:
    if len(token) < _TOKEN_MIN:
        return f"too short: use at least {_TOKEN_MIN} random characters (the value is not shown)"
    return None


def _check_table(name: str) -> str | None:
    return None if _TABLE.fullmatch(name) else f"not a plain lower-case table name: {name!r}"


@dataclass(frozen=True, slots=True)
class PingSettings(Section):
    """``POST /ping/<job>/...``: the token clients must send, and where runs are kept."""

    # None: pings are refused
    token: Annotated[Text | None, Secret(literal=False), check(_check_token)] = field(
        default=None, repr=False
    )
    # None: SQLite in the state dir
    store_dsn: Annotated[Dsn | None, Secret(), Field(alias="dsn")] = field(default=None, repr=False)
    table: Annotated[Text, check(_check_table)] = "lockwatch_job_runs"


@dataclass(frozen=True, slots=True)
class RunLearning(Section):
    """How ``max_duration: auto`` is learned: from the job's successful runs
    in its look-back, once there are ``min_runs``, max(factor x p99, floor)."""

    min_runs: Annotated[Whole, at_least(1)] = 10
    factor: Annotated[Number, at_least(1)] = 3.0
    floor: PositiveSeconds = 60.0  # seconds no learned limit goes below


@dataclass(frozen=True, slots=True)
class JobSpec(Section):
    """A job lockwatch follows: its schedule and limits, and where its runs come from."""

    # Job names go into ping URLs and metric labels: the target-name rules fit.
    name: Annotated[Name, UNIQUE]
    schedule: Schedule | None = None
    # seconds a run may take before job_too_long, or auto (learned from its runs)
    max_duration: Budget | None = None
    learning: RunLearning = field(default_factory=RunLearning)
    # failed runs in a row that make job_failed (1: every failed run)
    failures_before_alert: Annotated[Whole, at_least(1)] = 1
    lookback: PositiveSeconds = 2 * 86400.0  # seconds of run history considered
    event_ttl: PositiveSeconds = 3600.0  # seconds a duplicate start or a failure stays a finding
    # the target whose findings it joins (and whose database the query reads)
    target: Name | None = None
    query: Text | None = None  # the SQL source's query; None: runs come from pings

"""Jobs lockwatch follows, and where pinged runs are kept."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import Field

from lockwatch.settings.fields import (
    UNIQUE,
    Dsn,
    Name,
    PositiveSeconds,
    Secret,
    Section,
    Text,
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
class JobSpec(Section):
    """A job lockwatch follows: its schedule and limits, and where its runs come from."""

    # Job names go into ping URLs and metric labels: the target-name rules fit.
    name: Annotated[Name, UNIQUE]
    schedule: Schedule | None = None
    max_duration: PositiveSeconds | None = None  # seconds a run may take before job_too_long
    lookback: PositiveSeconds = 2 * 86400.0  # seconds of run history considered
    event_ttl: PositiveSeconds = 3600.0  # seconds a duplicate start or a failure stays a finding
    # the target whose findings it joins (and whose database the query reads)
    target: Name | None = None
    query: Text | None = None  # the SQL source's query; None: runs come from pings

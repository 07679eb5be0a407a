"""Jobs lockwatch follows, and where pinged runs are kept."""

from __future__ import annotations

from dataclasses import dataclass, field

from lockwatch.settings.schedule import Schedule


@dataclass(frozen=True, slots=True)
class PingSettings:
    """``POST /ping/<job>/...``: the token clients must send, and where runs are kept."""

    token: str | None = field(default=None, repr=False)  # None: pings are refused
    store_dsn: str | None = field(default=None, repr=False)  # None: SQLite in the state dir
    table: str = "lockwatch_job_runs"


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job lockwatch follows: its schedule and limits, and where its runs come from."""

    name: str
    schedule: Schedule | None = None
    max_duration: float | None = None  # seconds a run may take before job_too_long
    lookback: float = 2 * 86400.0  # seconds of run history considered
    event_ttl: float = 3600.0  # seconds a duplicate start or a failure stays a finding
    target: str | None = (
        None  # the target whose findings it joins (and whose database the query reads)
    )
    query: str | None = None  # the SQL source's query; None: runs come from pings

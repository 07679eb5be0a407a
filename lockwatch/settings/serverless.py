"""How lockwatch lets a serverless target sleep (Neon, Supabase): a compute
that suspends when idle stays awake for ever if a monitor polls it each second."""

from __future__ import annotations

from dataclasses import dataclass

from lockwatch.settings.fields import Interval, PositiveSeconds, Section


@dataclass(frozen=True, slots=True)
class SleepSettings(Section):
    # seconds lockwatch's session may be the server's only client before lockwatch
    # closes it and lets the server sleep
    after: PositiveSeconds = 300.0
    # seconds between looks while it sleeps: each one connects (and may wake it)
    interval: Interval = 900.0

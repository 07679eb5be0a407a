"""How lockwatch lets a serverless target sleep (Neon, Supabase): a compute
that suspends when idle stays awake for ever if a monitor polls it each second."""

from __future__ import annotations

from dataclasses import dataclass

from lockwatch.settings.fields import Interval, PositiveSeconds, Section

# Host name endings of providers whose compute suspends when idle.
SERVERLESS_HOSTS = {".neon.tech": "Neon", ".supabase.co": "Supabase", ".supabase.com": "Supabase"}


def serverless_provider(host: str) -> str | None:
    """``Neon`` for ``ep-cool-1.us-east-2.aws.neon.tech``; None for a host of no such provider.

    >>> serverless_provider("db.abcd.supabase.co"), serverless_provider("db.internal")
    ('Supabase', None)
    """
    name = host.lower().rstrip(".")
    return next((who for end, who in SERVERLESS_HOSTS.items() if name.endswith(end)), None)


@dataclass(frozen=True, slots=True)
class SleepSettings(Section):
    # seconds lockwatch's session may be the server's only client before lockwatch
    # closes it and lets the server sleep
    after: PositiveSeconds = 300.0
    # seconds between looks while it sleeps: each one connects (and may wake it)
    interval: Interval = 900.0

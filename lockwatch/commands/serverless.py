"""What ``check-config`` suggests for a target on a serverless host (Neon,
Supabase) that is not marked ``serverless``: a 1 s poll keeps such a compute
awake for ever, lockwatch's own session being its only activity."""

from __future__ import annotations

from collections.abc import Iterable

from lockwatch.commands.doctor import dsn_address
from lockwatch.settings.targets import Target

# Host name endings of providers whose compute suspends when idle.
SERVERLESS_HOSTS = {".neon.tech": "Neon", ".supabase.co": "Supabase", ".supabase.com": "Supabase"}


def serverless_provider(host: str) -> str | None:
    """``Neon`` for ``ep-cool-1.us-east-2.aws.neon.tech``; None for a host of no such provider.

    >>> serverless_provider("db.abcd.supabase.co"), serverless_provider("db.internal")
    ('Supabase', None)
    """
    name = host.lower().rstrip(".")
    return next((who for end, who in SERVERLESS_HOSTS.items() if name.endswith(end)), None)


def serverless_hints(targets: Iterable[Target]) -> list[str]:
    """A note for each target on a serverless provider's host not marked serverless."""
    hints = []
    for target in targets:
        address = dsn_address(target.dsn)
        provider = None if address is None else serverless_provider(address[0])
        if provider is None or target.serverless:
            continue
        hints.append(
            f"target {target.name}: its host is {provider}'s, whose compute sleeps when idle; "
            "lockwatch's polls keep it awake for ever unless the target has `serverless: true` "
            f"(then it lets it sleep once lockwatch has been its only client for "
            f"{target.sleep.after:g}s, and looks again every {target.sleep.interval:g}s)"
        )
    return hints

"""What ``check-config`` suggests for a target on a serverless host (Neon,
Supabase) that is not marked ``serverless``: a 1 s poll keeps such a compute
awake for ever, lockwatch's own session being its only activity."""

from __future__ import annotations

from collections.abc import Iterable

from lockwatch.commands.doctor import dsn_address
from lockwatch.settings.serverless import serverless_provider
from lockwatch.settings.targets import Target


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

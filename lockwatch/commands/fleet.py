"""``lockwatch check-config --shards n``: which shard watches which target.

The target sources are read once, as a shard would read them, and each target
is placed by the rendezvous hash of its PostgreSQL instance
(:mod:`lockwatch.settings.sharding`); the same config file on every shard
gives every shard the same answer.
"""

from __future__ import annotations

from collections.abc import Iterator

from lockwatch.fleet import Fleet
from lockwatch.settings.sharding import ALL, owner
from lockwatch.settings.targets import Settings


def shard_lines(settings: Settings, shards: int) -> Iterator[str]:
    fleet = Fleet(settings, ALL)
    try:
        fleet.refresh()
        targets = fleet.all_targets(settings)
        for health in fleet.status().sources:
            if health.error is not None:
                yield f"note: {health.error}: its targets are missing below"
    finally:
        fleet.stop()
    placed: dict[int, list[str]] = {shard: [] for shard in range(shards)}
    for target in targets:
        placed[owner(target.instance, shards)].append(f"{target.name} ({target.instance})")
    for shard, names in placed.items():
        instances = len({name.rsplit(" ", 1)[1] for name in names})
        yield f"shard {shard}/{shards}: {len(names)} target(s) on {instances} instance(s)"
        yield from (f"  {name}" for name in names)

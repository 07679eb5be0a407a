"""Which shard watches a target: rendezvous (highest-random-weight) hashing.

Every shard computes, for each target's key, a weight per shard and the
target goes to the shard of highest weight. No shard needs to know the others'
lists: the same config file gives every shard the same answer, and going from
n to n+1 shards moves only the targets the new shard now wins (about 1/(n+1)).
The key is the PostgreSQL instance (:attr:`Target.instance`), so every database
of one server lands on the same shard.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

# "i/n", where i may end a StatefulSet pod's name ("lockwatch-2/3"): Kubernetes
# expands $(POD_NAME) in the args, the ordinal is its trailing number.
_SHARD = re.compile(r"(?:.*\D)?(?P<index>\d+)/(?P<count>\d+)")


@dataclass(frozen=True, slots=True)
class Shard:
    index: int
    count: int

    def owns(self, key: str) -> bool:
        return owner(key, self.count) == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


ALL = Shard(0, 1)  # one instance watches everything


def parse_shard(text: str) -> Shard:
    """
    >>> parse_shard("1/3"), parse_shard("lockwatch-shard-2/3")
    (Shard(index=1, count=3), Shard(index=2, count=3))
    >>> parse_shard("3/3")
    Traceback (most recent call last):
    ...
    ValueError: shard 3 of 3: the index goes from 0 to 2
    """
    found = _SHARD.fullmatch(text.strip())
    if found is None:
        raise ValueError(f"not i/n (e.g. 0/3, or a pod name ending in its ordinal): {text!r}")
    index, count = int(found["index"]), int(found["count"])
    if count < 1:
        raise ValueError("the number of shards must be at least 1")
    if index >= count:
        raise ValueError(f"shard {index} of {count}: the index goes from 0 to {count - 1}")
    return Shard(index, count)


def check_shard(text: str) -> str | None:
    try:
        parse_shard(text)
    except ValueError as exc:
        return str(exc)
    return None


def weight(key: str, shard: int) -> int:
    """The key's weight on one shard: a stable 64-bit hash of both."""
    digest = hashlib.blake2b(f"{shard}\0{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner(key: str, count: int) -> int:
    """The shard, of ``count``, that watches ``key``."""
    return max(range(count), key=lambda shard: weight(key, shard))


def assignment(keys: Iterable[str], count: int) -> dict[int, list[str]]:
    """Each shard's keys, in the order given; every shard listed, even one with none."""
    shards: dict[int, list[str]] = {shard: [] for shard in range(count)}
    for key in keys:
        shards[owner(key, count)].append(key)
    return shards

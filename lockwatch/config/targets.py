"""``targets:`` and ``defaults:``: each server's connection, timings and locks.

Every key is a field of :class:`~lockwatch.settings.targets.Target` or of the
lock settings, by its name or alias. Where the YAML differs, it is here:

- ``defaults:`` sets the fields marked INHERITED for every target that does not
  set them itself (``locks`` key by key, without ``named``); its ``queues`` are
  the thresholds every queue starts from.
- ``allowed_holders.addresses`` holds the networks and, as ``local``,
  Unix-socket clients.
- A named lock may not cover a key another named lock covers, nor one that is
  ignored for every database.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from lockwatch.config.keys import field_key, file_keys, keys_of, values_of
from lockwatch.config.queues import Queues
from lockwatch.config.reader import Reading, Shape
from lockwatch.config.yamldata import FAILED, Loc, YamlList, YamlMap, dotted, entries, kind
from lockwatch.model.locks import LockKey
from lockwatch.settings.fields import INHERITED
from lockwatch.settings.locks import AllowedHolders, Key, LockSettings, NamedLock, Network
from lockwatch.settings.queues import QueueThresholds
from lockwatch.settings.targets import Target

TARGETS: Loc = ("targets",)
DEFAULTS: Loc = ("defaults",)
_DEFAULT_LOCKS: Loc = (*DEFAULTS, "locks")
_NAMED = "named"  # a target's own: defaults.locks has no names
_LOCAL = "local"  # among allowed_holders.addresses: Unix-socket clients
_ADDRESSES = "addresses"


class Targets:
    """What one reading of the targets remembers: the defaults, and the locks seen."""

    def __init__(self, queues: Queues) -> None:
        self.queues = queues
        self.inherited: dict[str, object] = {}  # defaults.<key>, validated
        # each locks mapping's ignored keys, with where each is listed
        self.ignored: dict[Loc, tuple[tuple[LockKey, Loc], ...]] = {}
        self.named: dict[Loc, list[tuple[NamedLock, Loc]]] = {}  # each named list so far

    def shapes(self) -> dict[type, Shape]:
        return {
            Target: _TargetShape(self),
            LockSettings: _LocksShape(self),
            NamedLock: _NamedShape(self),
            AllowedHolders: _HoldersShape(),
        }

    def read_defaults(self, reading: Reading, raw: object) -> None:
        if not isinstance(raw, YamlMap):
            reading.report(DEFAULTS, f"expected a mapping (key: value), got {kind(raw)}")
            return
        inherited = [key for key in keys_of(Target) if key.marked(INHERITED)]
        thresholds = "queues"
        data = reading.known(raw, [*(key.key for key in inherited), thresholds])
        for key in inherited:
            if key.key in data:
                value = reading.value(key.annotation, data[key.key], (*DEFAULTS, key.key))
                if value is not FAILED:
                    self.inherited[key.key] = value
        if thresholds in data:
            value = reading.value(QueueThresholds, data[thresholds], (*DEFAULTS, thresholds))
            if value is not FAILED:
                self.queues.defaults = value


class _TargetShape(Shape):
    def __init__(self, targets: Targets) -> None:
        self.targets = targets

    def before(self, reading: Reading, raw: YamlMap, data: dict[str, object]) -> dict[str, object]:
        for key, value in self.targets.inherited.items():
            own = data.get(key)
            if isinstance(own, YamlMap) and isinstance(value, LockSettings):
                inherited = {k: v for k, v in values_of(value).items() if k != _NAMED}
                data[key] = YamlMap(own.loc, {**inherited, **own})
            elif key not in data:
                data[key] = value
        # the target's queues and workers are checked against its interval
        interval = field_key(Target, "interval")
        fallback = self.targets.inherited.get(interval.key, interval.default)
        polled = reading.peek(interval.annotation, data.get(interval.key, fallback))
        self.targets.queues.target_interval = polled or reading.peek(interval.annotation, fallback)
        return data


class _LocksShape(Shape):
    def __init__(self, targets: Targets) -> None:
        self.targets = targets

    def keys(self, reading: Reading, cls: type[Any], raw: YamlMap) -> Collection[str]:
        keys = file_keys(cls)
        return [key for key in keys if key != _NAMED] if raw.loc == _DEFAULT_LOCKS else keys

    def before(self, reading: Reading, raw: YamlMap, data: dict[str, object]) -> dict[str, object]:
        own = data.get("ignore")
        if isinstance(own, YamlList):
            listed: dict[LockKey, Loc] = {}
            for loc, item in entries(own):
                key = reading.peek(Key, item)
                if key is not None:
                    listed.setdefault(key, loc)
            self.targets.ignored[raw.loc] = tuple(listed.items())
        else:
            # a target's list replaces the defaults' list, like every other setting
            self.targets.ignored[raw.loc] = self.targets.ignored.get(_DEFAULT_LOCKS, ())
        return data


class _NamedShape(Shape):
    def __init__(self, targets: Targets) -> None:
        self.targets = targets

    def after(self, reading: Reading, raw: YamlMap, value: Any) -> Any:
        lock: NamedLock = value
        key_loc = (*raw.loc, "key")
        placed = self.targets.named.setdefault(raw.loc[:-1], [])
        for other, other_loc in placed:
            # a lock without a database covers them all, so it overlaps any other
            if other.key == lock.key and (
                None in (other.database, lock.database) or other.database == lock.database
            ):
                where = other.database or "every database"
                reading.report(
                    key_loc,
                    f"key {lock.key} is already named {other.name!r} at {dotted(other_loc)} "
                    f"(in {where})",
                )
                break
        # with a database, the named lock is an exception to a key ignored
        # elsewhere; without one, either the name or the ignore entry is dead
        for key, listed in self.targets.ignored.get(raw.loc[:-2], ()):
            if key == lock.key and lock.database is None:
                reading.report(
                    key_loc,
                    f"key {lock.key} is both named and ignored (at {dotted(listed)}); "
                    "remove it there and set 'ignore: true' on the named lock instead",
                )
        placed.append((lock, raw.loc))
        return lock


class _HoldersShape(Shape):
    """``addresses`` holds ``networks`` and, as ``local``, Unix-socket clients."""

    spelled_otherwise = ("networks", "local")

    def keys(self, reading: Reading, cls: type[Any], raw: YamlMap) -> Collection[str]:
        return [*(k for k in file_keys(cls) if k not in self.spelled_otherwise), _ADDRESSES]

    def before(self, reading: Reading, raw: YamlMap, data: dict[str, object]) -> dict[str, object]:
        if _ADDRESSES not in data:
            return data
        addresses = data.pop(_ADDRESSES)
        loc = (*raw.loc, _ADDRESSES)
        if not isinstance(addresses, YamlList):
            data["networks"] = reading.value(tuple[Network, ...], addresses, loc)
            return data
        networks = [
            reading.value(Network, item, item_loc)
            for item_loc, item in entries(addresses)
            if item != _LOCAL
        ]
        data["networks"] = FAILED if FAILED in networks else tuple(networks)
        data["local"] = _LOCAL in addresses
        return data

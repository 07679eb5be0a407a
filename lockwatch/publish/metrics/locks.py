"""Which locks get series of their own, and the holder label they carry."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lockwatch.publish.api.locks import LockGroup
from lockwatch.settings.locks import LockSettings
from lockwatch.text import one_line, printable


def exported_locks(
    groups: list[LockGroup], settings: LockSettings
) -> list[tuple[str, str, LockGroup | None]]:
    """(database label, lock label, group) for every lock exported on its own.

    Every named lock that is not ignored, with an empty group when nobody holds
    or waits for it; then the ``top_n`` longest-held other keys (``groups`` comes
    longest-held first). Ignored keys never appear.
    """
    exported: list[tuple[str, str, LockGroup | None]] = []
    for named in settings.named:
        if named.ignore:
            continue
        matching = [g for g in groups if g.name == named.name and named.matches(g.database, g.key)]
        if not matching:
            exported.append((named.database or "", named.name, None))
        exported.extend((g.database, named.name, g) for g in matching)
    others = [g for g in groups if g.name is None and not g.ignored]
    exported.extend((g.database, g.lock, g) for g in others[: max(settings.top_n, 0)])
    # A lock name could equal another key's rendering; a repeated label set
    # would make the whole exposition invalid, so the first one wins.
    seen: set[tuple[str, str]] = set()
    unique = []
    for database, lock, group in exported:
        if (database, lock) not in seen:
            seen.add((database, lock))
            unique.append((database, lock, group))
    return unique


def named_holders(evidence: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The sessions a finding names as holders, the one it blames first: lock
    findings list them in ``holders`` and blame ``holder_pid``; a stalled queue
    names the holders of the lock its workers wait on, under ``lock``."""
    holders = evidence.get("holders")
    chain = evidence.get("lock")
    if not isinstance(holders, list) and isinstance(chain, Mapping):
        holders = chain.get("holders")
    records = [h for h in holders if isinstance(h, Mapping)] if isinstance(holders, list) else []
    lead = evidence.get("holder_pid")
    return sorted(records, key=lambda holder: holder.get("pid") != lead)


def holder_label(evidence: Mapping[str, Any]) -> str:
    """The session a finding blames, on one bounded line; "" for none.

    >>> holder_label({"holder_pid": 7, "holders": [{"pid": 6}, {"pid": 7,
    ...     "application_name": "worker\\n<b>", "client_addr": None}]})
    'pid 7 (worker <b> from local socket)'
    >>> holder_label({"lock": {"holders": [{"pid": 9, "client_addr": "10.0.0.5"}]}})
    'pid 9 (no application_name from 10.0.0.5)'
    """
    holders = named_holders(evidence)
    if not holders:
        return ""
    holder = holders[0]
    app = one_line(holder.get("application_name") or "") or "no application_name"
    where = one_line(holder.get("client_addr") or "") or "local socket"
    return printable(f"pid {one_line(holder.get('pid'))} ({app} from {where})")

"""Which locks get series of their own, and the holder label they carry."""

from __future__ import annotations

from lockwatch.model.evidence import Evidence
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


def holder_label(evidence: Evidence) -> str:
    """The session a finding blames, on one bounded line; "" for none.

    >>> from lockwatch.model.evidence import TargetDownEvidence
    >>> holder_label(TargetDownEvidence(error="refused", down_seconds=1.0))
    ''
    """
    holders = evidence.named_holders
    if not holders:
        return ""
    holder = holders[0]
    app = one_line(holder.application_name or "") or "no application_name"
    where = one_line(holder.client_addr or "") or "local socket"
    return printable(f"pid {holder.pid} ({app} from {where})")

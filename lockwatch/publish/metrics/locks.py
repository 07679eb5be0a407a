"""Which locks get series of their own, and the holder label they carry."""

from __future__ import annotations

from collections.abc import Collection, Iterator

from lockwatch.model.evidence import Evidence
from lockwatch.model.hold_history import HISTOGRAM_BUCKETS, DurationStats, KeyHistory
from lockwatch.publish.api.locks import LockGroup
from lockwatch.publish.metrics.families import Exposition, Histogram
from lockwatch.settings.locks import LockSettings
from lockwatch.state.target_view import TargetView
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


def _history_name(history: KeyHistory, settings: LockSettings) -> str | None:
    """The name of a key's history, a named or catalogued lock's; None for
    another key, whose ``lock`` label is the key (or ``(other keys)``)."""
    if history.key is None:
        return None
    named = settings.named_lock(history.database, history.key)
    return None if named is None else named.name


def history_metrics(
    views: tuple[TargetView, ...], scrape: Exposition, quiet: Collection[str] = ()
) -> Iterator[Histogram]:
    """The completed holds and waits of every key with a history (named,
    catalogued, the top N), and of all other keys as one ``(other keys)``;
    of a ``quiet`` target, only its named (and catalogued) keys'."""
    labels = ["target", "database", "lock"]
    holds = scrape.histogram(
        "lockwatch_advisory_lock_hold_duration_seconds",
        "Completed holds of the lock, from the first to the last poll that saw them "
        "(within one poll interval either way; a hold seen by one poll only counts as 0). "
        "Of a target with nothing wrong, its named locks' only, unless ?detail=full or ?target=.",
        labels,
    )
    waits = scrape.histogram(
        "lockwatch_advisory_lock_wait_duration_seconds",
        "Completed waits for the lock (granted or given up), from the first to the last "
        "poll that saw them waiting; the same locks as the holds'.",
        labels,
    )
    for view in views:
        seen: set[tuple[str, str]] = set()
        named_only = view.target.name in quiet
        for history in view.lock_history:
            name = _history_name(history, view.target.locks)
            if named_only and name is None:
                continue  # a quiet target's unnamed keys' past says nothing moved
            series = (history.database, history.lock if name is None else name)
            if series in seen:
                continue  # a name equal to another key's rendering: the first wins
            seen.add(series)
            values = (view.target.name, *series)
            _observe(holds, values, history.holds)
            _observe(waits, values, history.waits)
    yield from (holds, waits)


def _observe(family: Histogram, labels: tuple[str, ...], stats: DurationStats | None) -> None:
    if stats is None:
        return
    buckets = [
        (f"{bound:g}", count) for bound, count in zip(HISTOGRAM_BUCKETS, stats.buckets, strict=True)
    ]
    family.add(labels, [*buckets, ("+Inf", stats.count)], stats.total)

"""The per-kind cap on lock findings: at most FINDINGS_PER_KIND of one kind
are told one by one, the rest as one overflow finding, ranked only by what
stays put while a lock is held."""

from __future__ import annotations

from datetime import datetime

from lockwatch.detect.lock_groups import Draft
from lockwatch.model.evidence import HolderFacts, OverflowEvidence
from lockwatch.model.findings import Finding, Severity, Subject

# Findings of one kind reported one by one per target; the rest become one.
FINDINGS_PER_KIND = 100


OVERFLOW_SUBJECT = "(more locks)"


OVERFLOW_KEYS = 50  # keys listed in the evidence of the overflow finding


OVERFLOW_HOLDERS = 10  # holders named in the evidence of the overflow finding


Rank = tuple[bool, datetime, bool, int, int, str]


def _rank(draft: Draft) -> Rank:
    """Named locks first, then the oldest, then by key and database.

    Only what stays put while a lock is held (named, since, key), never the
    severity: a finding turning critical past the cap would push one reported
    on its own into the overflow, and that one would be told resolved while
    its lock is still held."""
    group = draft.group
    key = group.key
    return (group.named is None, draft.since, key.pair, key.first, key.second, group.database or "")


class Cap:
    """At most FINDINGS_PER_KIND findings of one kind, by ``_rank``; the rest
    are told as one: 50,000 orphaned locks are one problem to a person, and
    50,000 log lines and messages would bury it. A critical one past the cap
    makes the overflow finding critical.

    Only the best FINDINGS_PER_KIND + OVERFLOW_KEYS drafts are kept; those
    that fall behind them are only counted."""

    WINDOW = FINDINGS_PER_KIND + OVERFLOW_KEYS

    def __init__(self) -> None:
        self._best: list[tuple[Rank, Draft]] = []
        self._dropped = 0
        self._dropped_since: datetime | None = None
        self._dropped_critical = False

    def add(self, draft: Draft) -> None:
        self._best.append((_rank(draft), draft))
        if len(self._best) >= 2 * self.WINDOW:
            self._trim()

    def _trim(self) -> None:
        self._best.sort(key=lambda pair: pair[0])
        for _, draft in self._best[self.WINDOW :]:
            self.count(draft, 1)
        del self._best[self.WINDOW :]

    def count(self, like: Draft, more: int) -> None:
        """``more`` drafts judged as ``like`` whose keys rank behind the
        window's: past the cap whatever else comes."""
        self._dropped += more
        if self._dropped_since is None or like.since < self._dropped_since:
            self._dropped_since = like.since
        self._dropped_critical |= like.severity is Severity.CRITICAL

    def kept(self) -> list[Draft]:
        self._trim()
        return [draft for _, draft in self._best[:FINDINGS_PER_KIND]]

    def overflow(self, target: str) -> Finding | None:
        """The drafts past the cap, as one finding: how many, since when, which keys."""
        self._trim()
        rest = [draft for _, draft in self._best[FINDINGS_PER_KIND:]]
        if not rest:
            return None
        count = len(rest) + self._dropped
        since = min([d.since for d in rest] + [s for s in (self._dropped_since,) if s])
        critical = self._dropped_critical or any(d.severity is Severity.CRITICAL for d in rest)
        kind = rest[0].kind
        keys = [f"{d.group.database or '*'}/{d.group.label()}" for d in rest]
        return Finding(
            kind,
            target,
            Subject(lock=OVERFLOW_SUBJECT),
            Severity.CRITICAL if critical else Severity.WARNING,
            since,
            f"{count} more advisory locks with {kind.value} beyond the "
            f"{FINDINGS_PER_KIND} reported one by one, e.g. {', '.join(keys[:5])}",
            OverflowEvidence(
                count=count,
                locks=tuple(keys[:OVERFLOW_KEYS]),
                cap=FINDINGS_PER_KIND,
                holders=_blamed_holders(rest),
            ),
        )


def _blamed_holders(rest: list[Draft]) -> tuple[HolderFacts, ...]:
    """The holders the findings past the cap blame, the most blamed first (then
    by pid): their incidents are where the overflow belongs."""
    blamed: dict[tuple[int, str], list[HolderFacts]] = {}
    for draft in rest:
        evidence = draft.evidence()
        for holder in evidence.named_holders[:1] if evidence.holder_pid is not None else ():
            gid = "" if holder.prepared is None else holder.prepared.gid
            blamed.setdefault((holder.pid, gid), []).append(holder)
    order = sorted(blamed, key=lambda who: (-len(blamed[who]), who))
    return tuple(blamed[who][0] for who in order[:OVERFLOW_HOLDERS])

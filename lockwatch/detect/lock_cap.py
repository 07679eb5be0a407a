"""The per-kind cap on lock findings: at most FINDINGS_PER_KIND of one kind
are told one by one, ranked only by what stays put while a lock is held; the
rest are told per holder, one finding for each session (or prepared
transaction) they blame, so that no holder is ever hidden behind another.
What stays bounded is the number of holders told so (HOLDERS_PER_KIND); past
it, one finding says how many more sessions hold such locks."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from lockwatch.detect.lock_groups import Draft, holder_facts, who
from lockwatch.model.evidence import OverflowEvidence
from lockwatch.model.findings import MORE_HOLDERS_SUBJECT, Finding, FindingKind, Severity, Subject
from lockwatch.text import format_duration, one_line

# Findings of one kind reported one by one per target, key by key.
FINDINGS_PER_KIND = 100

# Holders past the cap told one by one per kind; the rest are counted.
HOLDERS_PER_KIND = 1000

# The subject of the locks past the cap that blame no holder (a convoy whose
# holder is unseen); the holders past HOLDERS_PER_KIND are MORE_HOLDERS_SUBJECT's.
OVERFLOW_SUBJECT = "(more locks)"

OVERFLOW_KEYS = 50  # keys listed in the evidence of an overflow finding


Rank = tuple[bool, datetime, bool, int, int, str]

# A holder: pid, backend_start, prepared gid ("" for a session).
HolderKey = tuple[int, datetime | None, str]


def is_overflow(lock: str | None) -> bool:
    """Whether a lock finding's subject is one of the cap's, not a key's."""
    return lock is not None and lock.startswith("(more ")


def _rank(draft: Draft) -> Rank:
    """Named locks first, then the oldest, then by key and database.

    Only what stays put while a lock is held (named, since, key), never the
    severity: a finding turning critical past the cap would push one reported
    on its own into the overflow, and that one would be told resolved while
    its lock is still held."""
    group = draft.group
    key = group.key
    return (group.named is None, draft.since, key.pair, key.first, key.second, group.database or "")


def _holder_key(draft: Draft) -> HolderKey | None:
    holder = draft.holder
    if holder is None:
        return None
    prepared = holder.lock.prepared
    if prepared is not None:
        return (holder.lock.pid, None, prepared.gid)
    backend = holder.backend
    return (holder.lock.pid, None if backend is None else backend.backend_start, "")


@dataclass(slots=True)
class _Past:
    """The drafts past the cap that blame one holder (or none)."""

    like: Draft  # the one whose holder has held longest: its facts are shown
    count: int = 0
    since: datetime | None = None
    critical: bool = False
    keys: list[str] = field(default_factory=list)

    def add(self, draft: Draft, more: int, key: str | None) -> None:
        self.count += more
        if self.since is None or draft.since < self.since:
            self.since = draft.since
        self.critical |= draft.severity is Severity.CRITICAL
        longest = self.like.holder
        if draft.holder is not None and longest is not None and draft.holder.held > longest.held:
            self.like = draft
        if key is not None and len(self.keys) < OVERFLOW_KEYS:
            self.keys.append(key)


class Cap:
    """At most FINDINGS_PER_KIND findings of one kind, by ``_rank``; the rest
    are told per holder: 50,000 orphaned locks of one session are one problem
    to a person, and 50,000 log lines and messages would bury it, but a second
    session's are another problem. A critical one past the cap makes its
    holder's finding critical.

    Only the best FINDINGS_PER_KIND + OVERFLOW_KEYS drafts are kept; those
    that fall behind them are only counted, by holder."""

    WINDOW = FINDINGS_PER_KIND + OVERFLOW_KEYS

    def __init__(self) -> None:
        self._best: list[tuple[Rank, Draft]] = []
        self._past: dict[HolderKey | None, _Past] = {}

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
        """``more`` drafts judged as ``like`` (the same holder) whose keys rank
        behind the window's: past the cap whatever else comes."""
        self._past_of(like).add(like, more, None)

    def _past_of(self, draft: Draft) -> _Past:
        who = _holder_key(draft)
        past = self._past.get(who)
        if past is None:
            past = self._past[who] = _Past(draft)
        return past

    def kept(self) -> list[Draft]:
        self._trim()
        return [draft for _, draft in self._best[:FINDINGS_PER_KIND]]

    def overflow(self, target: str, now: datetime) -> list[Finding]:
        """The drafts past the cap, one finding per holder they blame (the
        holders with the most first, at most HOLDERS_PER_KIND), one for those
        blaming none, and one counting the holders beyond."""
        self._trim()
        for _, draft in self._best[FINDINGS_PER_KIND:]:
            key = f"{draft.group.database or '*'}/{draft.group.label()}"
            self._past_of(draft).add(draft, 1, key)
        del self._best[FINDINGS_PER_KIND:]
        if not self._past:
            return []
        kind = next(iter(self._past.values())).like.kind
        unblamed = self._past.pop(None, None)
        order = sorted(self._past.values(), key=_most_first)
        findings = [_holder_finding(kind, target, past, now) for past in order[:HOLDERS_PER_KIND]]
        if unblamed is not None:
            findings.append(_unblamed_finding(kind, target, unblamed))
        beyond = order[HOLDERS_PER_KIND:]
        if beyond:
            findings.append(_beyond_finding(kind, target, beyond))
        return findings


def _most_first(past: _Past) -> tuple[int, int, str, str]:
    pid, started, gid = _holder_key(past.like) or (0, None, "")
    return (-past.count, pid, gid, "" if started is None else started.isoformat())


def _holder_subject(draft: Draft) -> Subject:
    """``(more locks of pid 1234)``: a pid names one session for as long as
    its locks are held (the incident's root tells sessions of one pid apart)."""
    holder = draft.holder
    assert holder is not None
    prepared = holder.lock.prepared
    if prepared is not None:
        name = f"prepared transaction '{one_line(prepared.gid)}'"
        return Subject(prepared.database, f"(more locks of {name})")
    return Subject(holder.lock.database, f"(more locks of pid {holder.lock.pid})")


def _holder_finding(kind: FindingKind, target: str, past: _Past, now: datetime) -> Finding:
    holder = past.like.holder
    assert holder is not None and past.since is not None
    listed = f", e.g. {', '.join(past.keys[:5])}" if past.keys else ""
    return Finding(
        kind,
        target,
        _holder_subject(past.like),
        Severity.CRITICAL if past.critical else Severity.WARNING,
        past.since,
        f"{past.count} more advisory locks with {kind.value} held by {who(holder)} beyond the "
        f"{FINDINGS_PER_KIND} reported one by one{listed}; longest held "
        f"{format_duration(holder.held)}",
        OverflowEvidence(
            count=past.count,
            locks=tuple(past.keys),
            cap=FINDINGS_PER_KIND,
            holders=(holder_facts(holder, now),),
        ),
    )


def _unblamed_finding(kind: FindingKind, target: str, past: _Past) -> Finding:
    assert past.since is not None
    return Finding(
        kind,
        target,
        Subject(lock=OVERFLOW_SUBJECT),
        Severity.CRITICAL if past.critical else Severity.WARNING,
        past.since,
        f"{past.count} more advisory locks with {kind.value} beyond the "
        f"{FINDINGS_PER_KIND} reported one by one, e.g. {', '.join(past.keys[:5])}",
        OverflowEvidence(count=past.count, locks=tuple(past.keys), cap=FINDINGS_PER_KIND),
    )


def _beyond_finding(kind: FindingKind, target: str, beyond: list[_Past]) -> Finding:
    """The holders past HOLDERS_PER_KIND: counted, never dropped."""
    locks = sum(past.count for past in beyond)
    keys = [key for past in beyond for key in past.keys][:OVERFLOW_KEYS]
    return Finding(
        kind,
        target,
        Subject(lock=MORE_HOLDERS_SUBJECT),
        Severity.CRITICAL if any(p.critical for p in beyond) else Severity.WARNING,
        min(p.since for p in beyond if p.since is not None),
        f"and {len(beyond)} more sessions hold advisory locks with {kind.value} "
        f"({locks} locks) beyond the {HOLDERS_PER_KIND} sessions told one by one",
        OverflowEvidence(count=locks, locks=tuple(keys), cap=HOLDERS_PER_KIND),
    )

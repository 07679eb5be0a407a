"""Lock findings about their holder: of each kind, one finding per session
(pid + backend_start) or prepared transaction that the drafts on keys the
config does not name blame, with the holder's keys summed up (how many, the
first few by key, the longest hold). A session holding 5,000 orphaned locks is
one problem to a person, and a second session's is another: no holder is
dropped, and no finding is kept per key to be thrown away.

Keys the config names (configured, catalogued, held on purpose by a queue
library) keep a finding of their own, as does a key whose holder is unseen (a
convoy behind a session of another database). What stays bounded is the
number of holders told one by one per kind (HOLDERS_PER_KIND); past it, one
finding says how many more sessions hold such locks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from lockwatch.detect.keepalive import with_lifetime
from lockwatch.detect.key_groups import Alike
from lockwatch.detect.lock_groups import Draft, Holder
from lockwatch.model.evidence import LockEvidence, OverflowEvidence
from lockwatch.model.findings import (
    MORE_HOLDERS_SUBJECT,
    Finding,
    FindingKind,
    Related,
    Severity,
    Subject,
)
from lockwatch.model.keepalive import ServerSettings
from lockwatch.model.locks import LockKey
from lockwatch.text import iso_text, iso_utc, one_line

# Holders told one by one per kind and target; the rest are counted in one finding.
HOLDERS_PER_KIND = 1000

KEYS_LISTED = 5  # a holder's keys a finding names; the rest are counted

# A holder: pid, backend_start, prepared gid ("" for a session).
HolderKey = tuple[int, datetime | None, str]


def holder_key(holder: Holder) -> HolderKey:
    prepared = holder.lock.prepared
    if prepared is not None:
        return (holder.lock.pid, None, prepared.gid)
    backend = holder.backend
    return (holder.lock.pid, None if backend is None else backend.backend_start, "")


def holder_subject(holder: Holder) -> Subject:
    """``pid 1234 started 2026-12-02T07:00:01Z`` (a pid alone names another
    session once the server reuses it), or ``prepared transaction 'nightly-7'``."""
    prepared = holder.lock.prepared
    if prepared is not None:
        return Subject(prepared.database, f"prepared transaction '{one_line(prepared.gid)}'")
    backend = holder.backend
    started = None if backend is None else iso_utc(backend.backend_start)
    name = f"pid {holder.lock.pid}" + (f" started {started}" if started else "")
    return Subject(holder.lock.database, name)


def _key_order(draft: Draft) -> tuple[bool, int, int]:
    key = draft.group.key
    return (key.pair, key.first, key.second)


# A key a holder's finding lists: its order, its database and its label.
Listed = tuple[tuple[bool, int, int], str, str]


@dataclass(slots=True)
class _Held:
    """The drafts of one kind that blame one holder."""

    worst: Draft  # the longest-held (the lowest key of those): its words and facts are shown
    count: int = 0
    since: datetime | None = None
    critical: bool = False
    first: list[Listed] = field(default_factory=list)  # the lowest keys, at most KEYS_LISTED

    def add(self, draft: Draft) -> None:
        self.count += 1
        if self.since is None or draft.since < self.since:
            self.since = draft.since
        self.critical |= draft.severity is Severity.CRITICAL
        if _worse(draft, self.worst):
            self.worst = draft
        group = draft.group
        self.listed((_key_order(draft), group.database or "*", group.label()))

    def listed(self, key: Listed) -> None:
        if len(self.first) < KEYS_LISTED or key < self.first[-1]:
            self.first.append(key)
            self.first.sort()
            del self.first[KEYS_LISTED:]


def _worse(draft: Draft, than: Draft) -> bool:
    held, other = draft.holder, than.holder
    assert held is not None and other is not None
    if held.held != other.held:
        return held.held > other.held
    return _key_order(draft) < _key_order(than)


class HolderTally:
    """One kind's drafts on keys the config does not name, told per holder."""

    def __init__(self) -> None:
        self._held: dict[HolderKey, _Held] = {}

    def add(self, draft: Draft, alike: Alike | None = None) -> None:
        """``draft``; with ``alike``, the keys never built that ``draft``
        (already added) stands for, judged as it was, whose keys are higher."""
        assert draft.holder is not None
        identity = holder_key(draft.holder)
        held = self._held.get(identity)
        if held is None:
            held = self._held[identity] = _Held(draft)
        if alike is None:
            held.add(draft)
            return
        held.count += alike.more
        for lock in alike.also:
            key = lock.key
            held.listed(((key.pair, key.first, key.second), lock.database, key.render()))

    def drafts(self) -> list[tuple[Draft, _Held]]:
        """The holders told one by one (the most keys first, at most
        HOLDERS_PER_KIND), each with the draft of its longest hold."""
        return [(held.worst, held) for held in self._order()[:HOLDERS_PER_KIND]]

    def _order(self) -> list[_Held]:
        return sorted(
            self._held.values(),
            key=lambda held: (-held.count, *_holder_order(held.worst)),
        )

    def beyond(self, target: str) -> list[Finding]:
        """One finding counting the holders past HOLDERS_PER_KIND: never dropped."""
        beyond = self._order()[HOLDERS_PER_KIND:]
        if not beyond:
            return []
        kind = beyond[0].worst.kind
        locks = sum(held.count for held in beyond)
        keys = [_key_text(key) for held in beyond for key in held.first][:KEYS_LISTED]
        return [
            Finding(
                kind,
                target,
                Subject(lock=MORE_HOLDERS_SUBJECT),
                Severity.CRITICAL if any(held.critical for held in beyond) else Severity.WARNING,
                min(held.since for held in beyond if held.since is not None),
                f"and {len(beyond)} more sessions hold advisory locks with {kind.value} "
                f"({locks} locks) beyond the {HOLDERS_PER_KIND} sessions told one by one",
                OverflowEvidence(count=locks, locks=tuple(keys), cap=HOLDERS_PER_KIND),
            )
        ]


def _holder_order(draft: Draft) -> tuple[int, str, str]:
    assert draft.holder is not None
    pid, started, gid = holder_key(draft.holder)
    return (pid, gid, "" if started is None else iso_text(started))


def _key_text(key: Listed) -> str:
    _, database, label = key
    return f"{database}/{label}"


def holder_summary(held: _Held, summary: str) -> str:
    """The longest hold's summary (which names the holder), after the count
    and the first keys when the holder has more than one."""
    if held.count == 1:
        return summary
    listed = ", ".join(label for _, _, label in held.first)
    more = ", …" if held.count > len(held.first) else ""
    return (
        f"{held.count} locks ({listed}{more}) with {held.worst.kind.value}; the longest: {summary}"
    )


def holder_evidence(held: _Held, evidence: LockEvidence) -> LockEvidence:
    """The longest hold's facts, with how many keys the holder has of the kind
    and the first of them."""
    return replace(
        evidence,
        held_keys=held.count,
        first_keys=tuple(_key_text(key) for key in held.first),
    )


def holder_finding(target: str, held: _Held, draft: Draft) -> Finding:
    """The finding about ``held``'s holder, from its longest hold's ``draft``
    (with its orphan lifetime, when it has one)."""
    assert draft.holder is not None and held.since is not None
    return Finding(
        draft.kind,
        target,
        holder_subject(draft.holder),
        Severity.CRITICAL if held.critical else Severity.WARNING,
        held.since,
        holder_summary(held, draft.summary()),
        holder_evidence(held, draft.evidence()),
    )


def told_findings(
    target: str,
    own: list[Draft],
    tallies: Mapping[FindingKind, HolderTally],
    timeouts: ServerSettings | None,
) -> list[Finding]:
    """The findings of one poll: a finding per draft in ``own`` (a named key's,
    or one blaming nobody) and per holder tallied, ordered by kind, database
    and key (a holder's by its longest hold's), each naming the others about
    its subject; then those counting the holders past the bound. Only these
    drafts write their words and facts (with an orphan's lifetime)."""
    told = [(_order(draft), _finding(target, with_lifetime(draft, timeouts))) for draft in own]
    told += [
        (_order(draft), holder_finding(target, tallied, with_lifetime(draft, timeouts)))
        for tally in tallies.values()
        for draft, tallied in tally.drafts()
    ]
    told.sort(key=lambda pair: pair[0])
    findings = _related([finding for _, finding in told])
    for tally in tallies.values():
        findings.extend(tally.beyond(target))
    return findings


def _order(draft: Draft) -> tuple[str, str, LockKey]:
    return (draft.kind.value, draft.group.database or "", draft.group.key)


def _finding(target: str, draft: Draft) -> Finding:
    return Finding(
        draft.kind,
        target,
        draft.group.subject,
        draft.severity,
        draft.since,
        draft.summary(),
        draft.evidence(),
    )


def _related(findings: list[Finding]) -> list[Finding]:
    """Each finding naming the others about its subject (a key, or a holder)."""
    kinds: dict[Subject, set[FindingKind]] = {}
    for finding in findings:
        kinds.setdefault(finding.subject, set()).add(finding.kind)
    return [
        replace(
            finding,
            related=tuple(
                Related(kind, finding.target, finding.subject)
                for kind in sorted(kinds[finding.subject] - {finding.kind})
            ),
        )
        if len(kinds[finding.subject]) > 1
        else finding
        for finding in findings
    ]

"""Which findings are active for a target, and which just fired or resolved.

Detectors say what is wrong at one instant; the ledger turns that into
ongoing problems: a finding keeps the ``since`` of its first appearance, and
only transitions are announced.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from lockwatch.model.evidence import Evidence
from lockwatch.model.evidence.json_form import JsonObject, JsonShapeError, from_json
from lockwatch.model.findings import (
    EVIDENCE_FAMILIES,
    Finding,
    FindingKind,
    Related,
    Severity,
    Subject,
    finding_json,
)
from lockwatch.model.incidents import IncidentChanges


@dataclass(frozen=True, slots=True)
class Transitions:
    active: tuple[Finding, ...]
    fired: tuple[Finding, ...]
    resolved: tuple[Finding, ...]
    # The target polled, so a listener learns of a poll that found nothing.
    target: str = ""
    # The same poll told as root causes (state/incidents.py fills it in).
    incidents: IncidentChanges = field(default_factory=IncidentChanges)


def dump_finding(finding: Finding) -> JsonObject:
    """A finding as the state file keeps it."""
    return finding_json(finding)


def load_finding(entry: Any) -> Finding | None:
    """The finding ``dump_finding`` made, or None when ``entry`` is not one.

    Evidence of an older shape is read as far as it goes: related findings
    that cannot be read (an older file names them by kind alone) are left
    out, and a finding whose evidence cannot be read is dropped, to fire
    again if it is still true."""
    try:
        since = datetime.fromisoformat(entry["since"])
        if since.tzinfo is None:
            # cannot be ordered against the findings the detectors make
            return None
        kind = FindingKind(entry["kind"])
        facts = dict(entry["evidence"])
        links = facts.pop("related", [])
        return Finding(
            kind=kind,
            target=str(entry["target"]),
            subject=from_json(Subject, entry["subject"]),
            severity=Severity(entry["severity"]),
            since=since,
            summary=str(entry["summary"]),
            evidence=read_evidence(kind, facts),
            related=_related(links),
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def read_evidence(kind: FindingKind, facts: object) -> Evidence:
    """The evidence ``kind`` carries, from its JSON; JsonShapeError when it is none of it."""
    for family in EVIDENCE_FAMILIES[kind]:
        try:
            return from_json(family, facts)
        except JsonShapeError:
            continue
    raise JsonShapeError(f"the evidence is of no family {kind.value} carries")


def _related(links: object) -> tuple[Related, ...]:
    readable = []
    for link in links if isinstance(links, list) else ():
        with contextlib.suppress(JsonShapeError):
            readable.append(from_json(Related, link))
    return tuple(readable)


class FindingLedger:
    def __init__(self, target: str = "") -> None:
        self.target = target
        self._active: dict[tuple[str, str, Subject], Finding] = {}

    @property
    def active(self) -> tuple[Finding, ...]:
        return tuple(sorted(self._active.values(), key=lambda f: (f.since, f.kind.value)))

    def update(
        self,
        current: Iterable[Finding],
        keep: Iterable[FindingKind] = (),
        hold: Collection[tuple[FindingKind, Subject]] = (),
    ) -> Transitions:
        """Replace the active set with ``current``.

        Findings of the kinds in ``keep`` stay active untouched even when absent
        from ``current``: while a target cannot be sampled, nobody knows whether
        its locks were released, so their findings neither resolve nor refire.
        ``hold`` does the same for single (kind, subject) pairs, such as a
        queue whose source fails.
        """
        kept_kinds = set(keep)
        fresh: dict[tuple[str, str, Subject], Finding] = {}
        fired: list[Finding] = []
        for finding in current:
            old = self._active.get(finding.identity)
            if old is None:
                fired.append(finding)
                fresh[finding.identity] = finding
            else:
                fresh[finding.identity] = replace(finding, since=min(old.since, finding.since))
        resolved = []
        for identity, old in self._active.items():
            if identity in fresh:
                continue
            if old.kind in kept_kinds or (old.kind, old.subject) in hold:
                fresh[identity] = old
            else:
                resolved.append(old)
        self._active = fresh
        return Transitions(self.active, tuple(fired), tuple(resolved), self.target)

    def dump(self) -> list[JsonObject]:
        return [dump_finding(f) for f in self._active.values()]

    def load(self, entries: object) -> None:
        """Restore the active set after a restart, so nothing is announced twice.

        Malformed entries are dropped: a finding that is still true fires again,
        which beats a daemon that cannot start."""
        restored: dict[tuple[str, str, Subject], Finding] = {}
        for entry in entries if isinstance(entries, list) else ():
            finding = load_finding(entry)
            if finding is not None:
                restored[finding.identity] = finding
        self._active = restored

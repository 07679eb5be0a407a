"""Which findings are active for a target, and which just fired or resolved.

Detectors say what is wrong at one instant; the ledger turns that into
ongoing problems: a finding keeps the ``since`` of its first appearance, and
only transitions are announced.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field, replace

from lockwatch.model.evidence.json_form import JsonObject
from lockwatch.model.findings import Finding, FindingKind, Subject, finding_json, load_finding
from lockwatch.model.incidents import IncidentChanges

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Transitions:
    active: tuple[Finding, ...]
    fired: tuple[Finding, ...]
    resolved: tuple[Finding, ...]
    # The target polled, so a listener learns of a poll that found nothing.
    target: str = ""
    # The same poll told as root causes (state/incidents.py fills it in).
    incidents: IncidentChanges = field(default_factory=IncidentChanges)


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
                earliest = min(old.since, finding.since)
                kept = finding if earliest == finding.since else replace(finding, since=earliest)
                fresh[finding.identity] = kept
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
        return [finding_json(f) for f in self._active.values()]

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


def log_findings(transitions: Transitions) -> None:
    """One line per finding that fired or resolved in a poll (people are told
    of incidents; the log keeps the findings too)."""
    for finding, verb, level in (
        *((f, "firing", logging.WARNING) for f in transitions.fired),
        *((f, "resolved", logging.INFO) for f in transitions.resolved),
    ):
        severity = f" [{finding.severity.value}]" if verb == "firing" else ""
        log.log(
            level,
            "%s %s%s %s/%s: %s",
            *(verb, finding.kind.value, severity, finding.target),
            *(finding.subject.render(), finding.summary),
        )

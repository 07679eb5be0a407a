"""Which findings are active for a target, and which just fired or resolved.

Detectors say what is wrong at one instant; the ledger turns that into
ongoing problems: a finding keeps the ``since`` of its first appearance, and
only transitions are announced.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from lockwatch.model import Finding, FindingKind, Severity, Subject


@dataclass(frozen=True, slots=True)
class Transitions:
    active: tuple[Finding, ...]
    fired: tuple[Finding, ...]
    resolved: tuple[Finding, ...]


class FindingLedger:
    def __init__(self) -> None:
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
        return Transitions(self.active, tuple(fired), tuple(resolved))

    def dump(self) -> list[dict[str, Any]]:
        return [
            {
                "kind": f.kind.value,
                "target": f.target,
                "subject": f.subject.as_dict(),
                "severity": f.severity.value,
                "since": f.since.isoformat(),
                "summary": f.summary,
                "evidence": dict(f.evidence),
            }
            for f in self._active.values()
        ]

    def load(self, entries: object) -> None:
        """Restore the active set after a restart, so nothing is announced twice.

        Malformed entries are dropped: a finding that is still true fires again,
        which beats a daemon that cannot start."""
        restored: dict[tuple[str, str, Subject], Finding] = {}
        for entry in entries if isinstance(entries, list) else ():
            try:
                since = datetime.fromisoformat(entry["since"])
                if since.tzinfo is None:
                    # cannot be ordered against the findings the detectors make
                    continue
                finding = Finding(
                    kind=FindingKind(entry["kind"]),
                    target=str(entry["target"]),
                    subject=Subject(**entry["subject"]),
                    severity=Severity(entry["severity"]),
                    since=since,
                    summary=str(entry["summary"]),
                    evidence=dict(entry.get("evidence") or {}),
                )
            except (KeyError, TypeError, ValueError):
                continue
            restored[finding.identity] = finding
        self._active = restored

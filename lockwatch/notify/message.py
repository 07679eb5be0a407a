"""What a notification says, before any channel's formatting: which findings,
each new, still firing or resolved. Plain values, saved in the outbox as JSON."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lockwatch.model.findings import Finding, Severity
from lockwatch.state.ledger import dump_finding, load_finding

RUNBOOKS = "https://github.com/lockwatch/lockwatch/blob/main/docs/runbooks.md"
SEVERITY_RANK = {severity: rank for rank, severity in enumerate(Severity)}


def alert_name(kind: str) -> str:
    """The alert a finding kind raises, the same name in the bundled Prometheus
    rules and in lockwatch's own notifications.

    >>> alert_name("lock_held_too_long")
    'LockwatchLockHeldTooLong'
    """
    return "Lockwatch" + "".join(part.capitalize() for part in kind.split("_"))


def runbook_url(alert: str) -> str:
    """
    >>> runbook_url("LockwatchLockConvoy")
    'https://github.com/lockwatch/lockwatch/blob/main/docs/runbooks.md#lockwatchlockconvoy'
    """
    return f"{RUNBOOKS}#{alert.lower()}"


class EntryState(enum.StrEnum):
    NEW = "new"  # announced by this message
    FIRING = "firing"  # announced before and still going on
    RESOLVED = "resolved"


@dataclass(frozen=True, slots=True)
class Entry:
    state: EntryState
    finding: Finding


@dataclass(frozen=True, slots=True)
class Message:
    """One notification to one channel: a group of related findings, the
    headline first. A message without entries is ``notify-test``'s."""

    id: str
    channel: str
    created_at: datetime
    entries: tuple[Entry, ...] = ()

    @property
    def test(self) -> bool:
        return not self.entries

    @property
    def headline(self) -> EntryState:
        return headline(self.entries)

    @property
    def firing(self) -> bool:
        return any(entry.state is not EntryState.RESOLVED for entry in self.entries)

    def dump(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "channel": self.channel,
            "created_at": self.created_at.isoformat(),
            "entries": [
                {"state": entry.state.value, "finding": dump_finding(entry.finding)}
                for entry in self.entries
            ],
        }

    @classmethod
    def load(cls, document: Any) -> Message | None:
        """The message ``dump`` made, or None when ``document`` is not one."""
        try:
            created_at = datetime.fromisoformat(document["created_at"])
            entries = []
            for item in document["entries"]:
                finding = load_finding(item["finding"])
                if finding is None:
                    return None
                entries.append(Entry(EntryState(item["state"]), finding))
            if created_at.tzinfo is None or not entries:
                return None
            return cls(str(document["id"]), str(document["channel"]), created_at, tuple(entries))
        except (KeyError, TypeError, ValueError):
            return None


def headline(entries: Iterable[Entry]) -> EntryState:
    """What a message is about: a new problem, else a resolution, else a reminder."""
    states = {entry.state for entry in entries}
    for state in (EntryState.NEW, EntryState.RESOLVED):
        if state in states:
            return state
    return EntryState.FIRING


def order_entries(entries: Iterable[Entry]) -> tuple[Entry, ...]:
    """The headline's entries first, then the most severe and oldest."""
    entries = list(entries)
    first = headline(entries)
    return tuple(
        sorted(
            entries,
            key=lambda e: (
                e.state is not first,
                SEVERITY_RANK[e.finding.severity],
                e.finding.since,
                e.finding.kind.value,
            ),
        )
    )

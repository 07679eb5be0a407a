"""What a notification says, before any channel's formatting: one incident,
opened, worse, still open or resolved, told as the words of
``model/incident_text``. Plain values, saved in the outbox as JSON, so a
message outlives a restart without the incident it came from."""

from __future__ import annotations

import enum
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lockwatch.model.findings import Severity
from lockwatch.model.incident_text import (
    SHOWN_FINDINGS,
    Said,
    incident_lines,
    lead_kind,
    more_findings,
    root_labels,
)
from lockwatch.model.incidents import Incident


class Headline(enum.StrEnum):
    """Why a message about an incident goes out."""

    OPENED = "opened"
    WORSE = "worse"  # a new finding kind joined, or its severity rose
    REMINDER = "reminder"  # still open, its repeat interval passed
    RESOLVED = "resolved"
    UPDATED = "updated"  # it grew (waiters, hold time, backlog): a living message is edited


@dataclass(frozen=True, slots=True)
class Told:
    """One of the first findings of an incident, as a message lists it."""

    kind: str
    severity: str
    where: str  # the target and the subject: "main · app/42"
    summary: str
    before: bool  # its kind was told in an earlier message about the incident

    def dump(self) -> list[object]:
        return [self.kind, self.severity, self.where, self.summary, self.before]

    @classmethod
    def load(cls, item: Any) -> Told:
        kind, severity, where, summary, before = item
        return cls(str(kind), str(severity), str(where), str(summary), bool(before))


@dataclass(frozen=True, slots=True)
class Notice:
    """An incident as one message tells it: the words, not the incident."""

    incident: str  # its id
    target: str
    kind: str  # its leading kind: the alert's name and runbook
    severity: Severity
    title: str
    said: tuple[Said, ...]
    runbook: str
    opened_at: datetime
    labels: tuple[tuple[str, str], ...]  # model.incident_text.root_labels
    resolved_at: datetime | None = None
    resolution: str | None = None
    findings: tuple[Told, ...] = ()  # its first findings
    more: int = 0  # its findings past those
    # its root's: the same on every replica, where the ids differ ("" in older outboxes)
    fingerprint: str = ""
    openings: int = 1  # how often it opened: more than once, it flaps

    @property
    def key(self) -> str:
        """What names the incident in what a channel was told: its root, so
        that another replica, which gave it another id, knows it too."""
        return self.fingerprint or self.incident

    @classmethod
    def of(cls, incident: Incident, told_kinds: Collection[str] = ()) -> Notice:
        """``told_kinds``: the finding kinds earlier messages told of."""
        shown = incident.findings[:SHOWN_FINDINGS]
        return cls(
            incident=incident.id,
            target=incident.target,
            kind=lead_kind(incident).value,
            severity=incident.severity,
            title=incident.title,
            said=tuple(incident_lines(incident)),
            runbook=incident.next_step.runbook,
            opened_at=incident.opened_at,
            labels=tuple(root_labels(incident).items()),
            resolved_at=incident.resolved_at,
            resolution=None if incident.resolution is None else incident.resolution.value,
            findings=tuple(
                Told(
                    f.kind.value,
                    f.severity.value,
                    f"{f.target} · {f.subject.render()}",
                    f.summary,
                    f.kind.value in told_kinds,
                )
                for f in shown
            ),
            more=more_findings(incident, SHOWN_FINDINGS),
            fingerprint=incident.fingerprint,
            openings=len(incident.openings),
        )

    def dump(self) -> dict[str, Any]:
        return {
            "incident": self.incident,
            "target": self.target,
            "kind": self.kind,
            "severity": self.severity.value,
            "title": self.title,
            "said": [[s.label, s.text, s.code] for s in self.said],
            "runbook": self.runbook,
            "opened_at": self.opened_at.isoformat(),
            "labels": [list(pair) for pair in self.labels],
            "resolved_at": None if self.resolved_at is None else self.resolved_at.isoformat(),
            "resolution": self.resolution,
            "findings": [told.dump() for told in self.findings],
            "more": self.more,
            "fingerprint": self.fingerprint,
            "openings": self.openings,
        }

    @classmethod
    def load(cls, document: Any) -> Notice:
        """The notice ``dump`` made; raises KeyError, TypeError or ValueError
        when ``document`` is not one."""
        opened_at = datetime.fromisoformat(document["opened_at"])
        resolved = document["resolved_at"]
        if opened_at.tzinfo is None:
            raise ValueError("opened_at without a time zone")
        return cls(
            incident=str(document["incident"]),
            target=str(document["target"]),
            kind=str(document["kind"]),
            severity=Severity(document["severity"]),
            title=str(document["title"]),
            said=tuple(Said(str(a), str(b), bool(c)) for a, b, c in document["said"]),
            runbook=str(document["runbook"]),
            opened_at=opened_at,
            labels=tuple((str(k), str(v)) for k, v in document["labels"]),
            resolved_at=None if resolved is None else datetime.fromisoformat(resolved),
            resolution=None if document["resolution"] is None else str(document["resolution"]),
            findings=tuple(Told.load(item) for item in document["findings"]),
            more=int(document["more"]),
            fingerprint=str(document.get("fingerprint") or ""),
            openings=int(document.get("openings", 1)),
        )


@dataclass(frozen=True, slots=True)
class Message:
    """One notification to one channel about one incident. A message without a
    notice is ``notify-test``'s."""

    id: str
    channel: str
    created_at: datetime
    notice: Notice | None = None
    headline: Headline = Headline.OPENED

    @property
    def test(self) -> bool:
        return self.notice is None

    @property
    def firing(self) -> bool:
        return self.notice is not None and self.headline is not Headline.RESOLVED

    def dump(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "channel": self.channel,
            "created_at": self.created_at.isoformat(),
            "headline": self.headline.value,
            "notice": None if self.notice is None else self.notice.dump(),
        }

    @classmethod
    def load(cls, document: Any) -> Message | None:
        """The message ``dump`` made, or None when ``document`` is not one (an
        older outbox's message about findings among them)."""
        try:
            created_at = datetime.fromisoformat(document["created_at"])
            notice = Notice.load(document["notice"])
            if created_at.tzinfo is None:
                return None
            return cls(
                str(document["id"]),
                str(document["channel"]),
                created_at,
                notice,
                Headline(document["headline"]),
            )
        except (KeyError, TypeError, ValueError):
            return None

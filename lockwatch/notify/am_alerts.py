"""Incidents as Alertmanager alerts (``POST /api/v2/alerts``), and the book of
what a channel has pushed: pure, no I/O.

Alertmanager is not a message receiver but a state sink: it wants the firing
alerts sent again and again, and each one's end. Every lockwatch replica
watching a target pushes the same incident, so an alert's labels are those
every replica gives it: the root's identity (its fingerprint and the parts
that name it) and the severity, never the incident id (each replica makes its
own) nor the leading finding kind (two replicas polling a second apart may see
the findings join in another order). Those go in the annotations, where
Alertmanager takes the latest push's and notifies on no change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from lockwatch.model.findings import Severity
from lockwatch.model.incident_text import identity_labels, incident_lines, lead_kind, root_labels
from lockwatch.model.incidents import Incident, RootKind
from lockwatch.model.remediation import SQL_LIMIT
from lockwatch.notify.outbox import due
from lockwatch.settings.notify import AlertmanagerChannel, NotifySettings
from lockwatch.text import one_line, printable
from lockwatch.util.secrets import redact

ALERT_NAME = "LockwatchIncident"
TEST_ALERT_NAME = "LockwatchNotifyTest"
TEST_ALERT_LASTS = timedelta(minutes=5)  # notify-test's alert ends on its own after this
EXPIRY_RESENDS = 4  # a firing alert ends this many resend intervals after its last push
MAX_ENDED = 1000  # ended alerts kept until every Alertmanager heard of their end
ANNOTATION_LIMIT = 500
# The root's parts that name it (IncidentRoot.identity), as labels; what people
# call the root (application name, address) may change under it, so it does not.
IDENTITY_LABELS = ("database", "lock", "queue", "job_name", "source", "pid")
OWN_LABELS = frozenset({"alertname", "target", "fingerprint", "root", "severity", *IDENTITY_LABELS})
# What a description leaves out: the next step has annotations of its own, and a
# last query, written by any client, may quote a password.
_NOT_DESCRIBED = frozenset({"next step", "sql", "cost", "last query"})

LabelSet = tuple[tuple[str, str], ...]  # sorted by name: one alert's identity


@dataclass(frozen=True, slots=True)
class Alert:
    """One incident as an alert, without its end: that depends on when it is pushed."""

    labels: LabelSet
    annotations: tuple[tuple[str, str], ...]
    starts_at: datetime
    generator_url: str = ""
    incident: str = ""  # the id on this replica, to find its end
    target: str = ""

    def document(self, ends_at: datetime) -> dict[str, Any]:
        """The alert as ``POST /api/v2/alerts`` takes it."""
        document: dict[str, Any] = {
            "labels": dict(self.labels),
            "annotations": dict(self.annotations),
            "startsAt": rfc3339(self.starts_at),
            "endsAt": rfc3339(max(ends_at, self.starts_at)),
        }
        if self.generator_url:
            document["generatorURL"] = self.generator_url
        return document


def rfc3339(moment: datetime) -> str:
    """
    >>> rfc3339(datetime(2026, 11, 29, 9, 14, 59, 123456, tzinfo=UTC))
    '2026-11-29T09:14:59.123Z'
    """
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _text(value: str, limit: int = ANNOTATION_LIMIT) -> str:
    return redact(printable(one_line(value, limit)))


def incident_labels(incident: Incident, static: Mapping[str, str] = {}) -> dict[str, str]:
    """The labels of ``incident``'s alert: the same on every replica for the same
    root and severity. A pooled backend is the session it is (pgbouncer's view of
    it may show on one replica's poll and not on another's). Empty ones are left
    out; ``static`` ones (the channel's ``labels``) never replace lockwatch's own."""
    said = identity_labels(incident.root)
    kind = RootKind.SESSION if incident.root.kind is RootKind.POOLED_BACKEND else incident.root.kind
    labels = {name: value for name, value in static.items() if name not in OWN_LABELS}
    labels.update(
        alertname=ALERT_NAME,
        target=_text(incident.target, 80),
        fingerprint=incident.fingerprint,
        root=kind.value,
        severity=incident.severity.value,
    )
    labels.update((name, said[name]) for name in IDENTITY_LABELS if said[name])
    return labels


def incident_alert(incident: Incident, channel: AlertmanagerChannel) -> Alert:
    """``incident`` as an alert of ``channel``: its labels, and its words as annotations."""
    lines = incident_lines(incident)
    described = [f"{s.label}: {_text(s.text)}" for s in lines if s.label not in _NOT_DESCRIBED]
    step = incident.next_step
    annotations = {
        "summary": _text(incident.title),
        "description": "\n".join(described),
        "next_step": _text(step.action, 1000),
        "sql": _text(step.sql or "", SQL_LIMIT),
        "runbook_url": step.runbook,
        "incident": incident.id,
        "kind": lead_kind(incident).value,
    }
    if incident.root.application_name:
        annotations["application"] = root_labels(incident)["application"]
    generator = ""
    if channel.external_url:
        generator = f"{channel.external_url.rstrip('/')}/#incident-{incident.id}"
    labels = incident_labels(incident, channel.labels)
    return Alert(
        labels=tuple(sorted(labels.items())),
        annotations=tuple((k, redact(v, channel.secrets)) for k, v in annotations.items() if v),
        starts_at=incident.opened_at,
        generator_url=generator,
        incident=incident.id,
        target=incident.target,
    )


def notify_test_alert(channel: AlertmanagerChannel, now: datetime) -> dict[str, Any]:
    """``lockwatch notify-test``'s alert: it fires, and ends on its own a few minutes later."""
    labels = {**channel.labels, "alertname": TEST_ALERT_NAME, "severity": Severity.INFO.value}
    alert = Alert(
        labels=tuple(sorted({**labels, "channel": channel.name}.items())),
        annotations=(
            ("summary", f"lockwatch test alert from channel {channel.name}"),
            ("description", "lockwatch notify-test: this Alertmanager takes lockwatch's alerts."),
        ),
        starts_at=now,
    )
    return alert.document(now + TEST_ALERT_LASTS)


# -- what a channel has pushed -----------------------------------------------------


@dataclass(slots=True)
class Firing:
    alert: Alert
    # Alertmanager -> the end its last push that carried this alert gave it
    ends: dict[str, datetime] = field(default_factory=dict)


@dataclass(slots=True)
class Ended:
    """An alert that stopped firing, kept until each Alertmanager that had it
    was told its end, or has let it expire on its own."""

    alert: Alert
    ended_at: datetime
    untold: dict[str, datetime]  # Alertmanager -> when it expires the alert itself


@dataclass(frozen=True, slots=True)
class Push:
    """One push's alerts, and which alerts they are."""

    at: datetime
    generation: int
    documents: list[dict[str, Any]]
    firing: tuple[Alert, ...]
    ended: tuple[LabelSet, ...]


class AlertBook:
    """The alerts a channel is pushing: firing ones, and ended ones not yet told.

    ``generation`` moves when an alert starts or ends: every Alertmanager is
    then pushed again at once, not only at the next resend.
    """

    def __init__(self, channel: AlertmanagerChannel, settings: NotifySettings) -> None:
        self.channel = channel
        self.settings = settings
        self.firing: dict[LabelSet, Firing] = {}
        self.ended: dict[LabelSet, Ended] = {}
        self.generation = 0
        self.dropped = 0  # ended alerts given up on untold (more than MAX_ENDED)
        self._of_target: dict[str, set[LabelSet]] = {}  # the labels firing per target
        self._due: dict[str, datetime] = {}  # when a target's next incident passes its `for`

    @property
    def expiry(self) -> timedelta:
        return timedelta(seconds=EXPIRY_RESENDS * self.channel.resend_interval)

    def due_targets(self, now: datetime) -> list[str]:
        """The targets with an incident whose ``for`` has passed since their update."""
        return [target for target, at in self._due.items() if at <= now]

    def update(
        self,
        target: str,
        active: Iterable[Incident],
        resolved: Mapping[str, Incident],
        now: datetime,
    ) -> None:
        """The incidents open on ``target`` now (those routed here whose ``for``
        passed fire) and those just resolved (their end is their resolution's
        time). The other targets' alerts stay as they are."""
        firing: dict[LabelSet, Firing] = {}
        self._due.pop(target, None)
        for incident in active:
            timing = due(self.settings, incident, self.channel.name)
            if timing is None:
                continue
            if now < timing.at:
                self._due[target] = min(self._due.get(target, timing.at), timing.at)
                continue
            alert = incident_alert(incident, self.channel)
            before = self.firing.get(alert.labels)
            firing[alert.labels] = Firing(alert, {} if before is None else before.ends)
        before_labels = self._of_target.pop(target, set())
        for labels in before_labels - firing.keys():
            gone = self.firing.pop(labels)
            final = resolved.get(gone.alert.incident)
            ended_at = now if final is None or final.resolved_at is None else final.resolved_at
            self._end(labels, gone, ended_at)
        for labels in firing.keys() & self.ended.keys():
            del self.ended[labels]  # fires again: its end is no news any more
        self.firing.update(firing)
        if firing:
            self._of_target[target] = set(firing)
        if before_labels != firing.keys():
            self.generation += 1

    def _end(self, labels: LabelSet, gone: Firing, ended_at: datetime) -> None:
        if not gone.ends:
            return  # no Alertmanager has it
        self.ended[labels] = Ended(gone.alert, ended_at, dict(gone.ends))
        while len(self.ended) > MAX_ENDED:
            del self.ended[next(iter(self.ended))]
            self.dropped += 1

    def payload(self, alertmanager: str, now: datetime) -> Push:
        """What to push to ``alertmanager`` now: every firing alert, ending
        ``expiry`` from now, and each ended one it has not heard the end of."""
        ended = tuple(
            labels
            for labels, alert in self.ended.items()
            if now < alert.untold.get(alertmanager, now)
        )
        ends_at = now + self.expiry
        documents = [f.alert.document(ends_at) for f in self.firing.values()]
        documents += [
            self.ended[labels].alert.document(self.ended[labels].ended_at) for labels in ended
        ]
        firing = tuple(f.alert for f in self.firing.values())
        return Push(now, self.generation, documents, firing, ended)

    def pushed(self, alertmanager: str, push: Push) -> list[Alert]:
        """``alertmanager`` took ``push``: it has those alerts, and those ends.
        Returns the alerts no Alertmanager had before: news to Alertmanager."""
        news = []
        ends_at = push.at + self.expiry
        for alert in push.firing:
            firing = self.firing.get(alert.labels)
            if firing is not None:
                if not firing.ends:
                    news.append(firing.alert)
                firing.ends[alertmanager] = ends_at
            elif alert.labels in self.ended:
                untold = self.ended[alert.labels].untold
                untold[alertmanager] = max(untold.get(alertmanager, ends_at), ends_at)
            else:
                # It ended while this push was on its way: its end is news here too.
                self._end(alert.labels, Firing(alert, {alertmanager: ends_at}), push.at)
        for labels in push.ended:
            if labels in self.ended:
                self.ended[labels].untold.pop(alertmanager, None)
        self.forget(push.at)
        return news

    def forget(self, now: datetime) -> None:
        """Drop the ends every Alertmanager heard, or has expired by itself."""
        for labels, ended in list(self.ended.items()):
            ended.untold = {am: until for am, until in ended.untold.items() if now < until}
            if not ended.untold:
                del self.ended[labels]

    @property
    def untold(self) -> int:
        return len(self.ended)

"""``/api/v1/incidents`` and ``/api/v1/incidents/<id>``: the open incidents
from the board, the resolved ones from the history, in one stable order.

Pure but for the history it is handed. Filters: ``state`` (open, resolved),
``target``, ``kind`` (a finding kind that has been part of it), ``since``
(``1d``, ``2h``, or an ISO 8601 moment: what was open or resolved since then);
pages: ``limit`` (at most MAX_LIMIT) and ``cursor`` (the ``next_cursor`` of the
page before). A list carries the first LISTED_FINDINGS findings of each
incident; one incident by id carries them all. The notifier's deliveries join
each incident's timeline as ``notified`` events.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from lockwatch.model.findings import FindingKind
from lockwatch.model.incidents import SEVERITY_RANK, Incident, IncidentState, incident_json
from lockwatch.publish.api.encode import _views, json_safe
from lockwatch.settings.fields import parse_duration
from lockwatch.state.board import Board
from lockwatch.state.deliveries import Deliveries
from lockwatch.state.incident_history import IncidentHistory
from lockwatch.state.target_view import TargetView

DEFAULT_LIMIT = 50
LISTED_FINDINGS = 20  # findings per incident in a list; /api/v1/incidents/<id> has all
MAX_LIMIT = 500
_DAYS = re.compile(r"(\d+(?:\.\d+)?)([dw])")


class QueryError(ValueError):
    """A filter or page parameter that cannot be read; the message says which."""


def parse_since(text: str, now: datetime) -> datetime:
    """A moment from ``1d``, ``3w``, ``2h``, ``30m`` (that long before ``now``)
    or an ISO 8601 moment (UTC when it names no zone).

    >>> now = datetime(2026, 12, 1, tzinfo=UTC)
    >>> parse_since("1d", now).isoformat(), parse_since("90m", now).isoformat()
    ('2026-11-30T00:00:00+00:00', '2026-11-30T22:30:00+00:00')
    """
    text = text.strip()
    days = _DAYS.fullmatch(text)
    try:
        if days is not None:
            count = float(days.group(1)) * (7 if days.group(2) == "w" else 1)
            return now - timedelta(days=count)
        if re.fullmatch(r"\d{4}-\d\d-\d\d.*", text):
            moment = datetime.fromisoformat(text)
            return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
        return now - timedelta(seconds=parse_duration(text))
    except (ValueError, OverflowError):
        raise QueryError(
            f"since: not a duration (1d, 2h, 30m) or an ISO 8601 moment: {text[:40]!r}"
        ) from None


@dataclass(frozen=True, slots=True)
class IncidentQuery:
    state: IncidentState | None = None
    target: str | None = None
    kind: FindingKind | None = None
    since: datetime | None = None
    limit: int = DEFAULT_LIMIT
    offset: int = 0

    @classmethod
    def parse(cls, params: Mapping[str, Sequence[str]], now: datetime) -> IncidentQuery:
        """The query of a request's parameters (``parse_qs`` form); QueryError
        naming the first one that cannot be read."""
        known = {"state", "target", "kind", "since", "limit", "cursor"}
        unknown = sorted(set(params) - known)
        if unknown:
            raise QueryError(f"unknown parameter {unknown[0]!r} (use {', '.join(sorted(known))})")
        first = {name: values[-1] for name, values in params.items() if values}
        try:
            state = IncidentState(first["state"]) if "state" in first else None
        except ValueError:
            raise QueryError("state: open or resolved") from None
        try:
            kind = FindingKind(first["kind"]) if "kind" in first else None
        except ValueError:
            raise QueryError(f"kind: no finding kind is called {first['kind']!r}") from None
        return cls(
            state=state,
            target=first.get("target"),
            kind=kind,
            since=parse_since(first["since"], now) if "since" in first else None,
            limit=_whole(first.get("limit"), "limit", DEFAULT_LIMIT, 1, MAX_LIMIT),
            offset=_whole(first.get("cursor"), "cursor", 0, 0, None),
        )

    def admits(self, incident: Incident) -> bool:
        if self.state is not None and incident.state is not self.state:
            return False
        if self.target is not None and incident.target != self.target:
            return False
        if self.kind is not None and self.kind not in incident.kinds:
            return False
        moment = incident.resolved_at or incident.updated_at
        return self.since is None or moment >= self.since


def _whole(text: str | None, name: str, default: int, low: int, high: int | None) -> int:
    if text is None:
        return default
    if not text.isdigit() or int(text) < low or (high is not None and int(text) > high):
        most = "" if high is None else f" to {high}"
        raise QueryError(f"{name}: a whole number from {low}{most}")
    return int(text)


def incident_order(incident: Incident) -> tuple[int, int, float, str]:
    """Open first (the worst, then the oldest), then resolved (the newest first);
    the id settles ties, so pages never overlap."""
    if incident.state is IncidentState.OPEN:
        return (0, SEVERITY_RANK[incident.severity], incident.opened_at.timestamp(), incident.id)
    resolved = incident.resolved_at or incident.updated_at
    return (1, 0, -resolved.timestamp(), incident.id)


def all_incidents(
    board_or_views: Board | Iterable[TargetView], history: IncidentHistory | None
) -> list[Incident]:
    """Every incident known: open ones and recently resolved ones from the
    board, the rest from the history (an id once, the board's copy first)."""
    views = _views(board_or_views)
    known: dict[str, Incident] = {}
    for view in views:
        for incident in (*view.incidents, *view.resolved_incidents):
            known.setdefault(incident.id, incident)
    for incident in () if history is None else history.resolved():
        known.setdefault(incident.id, incident)
    return sorted(known.values(), key=incident_order)


def incidents_document(
    board_or_views: Board | Iterable[TargetView],
    history: IncidentHistory | None,
    query: IncidentQuery,
    deliveries: Deliveries | None = None,
) -> dict[str, Any]:
    return page_document(all_incidents(board_or_views, history), query, deliveries)


def page_document(
    incidents: Iterable[Incident], query: IncidentQuery, deliveries: Deliveries | None = None
) -> dict[str, Any]:
    """The page of ``incidents`` (in ``incident_order``) the query asks for."""
    chosen = [i for i in sorted(incidents, key=incident_order) if query.admits(i)]
    page = chosen[query.offset : query.offset + query.limit]
    if deliveries is not None:
        page = [deliveries.joined(incident) for incident in page]
    following = query.offset + query.limit
    document: dict[str, Any] = json_safe(
        {
            "incidents": [incident_json(incident, LISTED_FINDINGS) for incident in page],
            "total": len(chosen),
            "next_cursor": str(following) if following < len(chosen) else None,
        }
    )
    return document


def incident_document(
    board_or_views: Board | Iterable[TargetView],
    history: IncidentHistory | None,
    ident: str,
    deliveries: Deliveries | None = None,
) -> dict[str, Any] | None:
    """``{"incident": ...}`` for one id, the board's copy first; None when no
    incident has it."""
    views = _views(board_or_views)
    on_board = (i for view in views for i in (*view.incidents, *view.resolved_incidents))
    found = next((i for i in on_board if i.id == ident), None)
    if found is None and history is not None:
        found = history.get(ident)
    if found is None:
        return None
    if deliveries is not None:
        found = deliveries.joined(found)
    document: dict[str, Any] = json_safe({"incident": incident_json(found)})
    return document


def incident_ids(
    board_or_views: Board | Iterable[TargetView],
) -> dict[tuple[str, str, object], str]:
    """The open incident of each active finding, by the finding's identity."""
    return {
        finding.identity: incident.id
        for view in _views(board_or_views)
        for incident in view.incidents
        for finding in incident.findings
    }

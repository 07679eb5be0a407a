"""``/api/v1/findings``: every active finding, most severe first."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from lockwatch.model.evidence.json_form import JsonObject
from lockwatch.model.findings import Finding, Severity, finding_json
from lockwatch.publish.api.encode import _views, json_safe
from lockwatch.publish.api.incidents import incident_ids
from lockwatch.state.board import Board
from lockwatch.state.target_view import TargetView
from lockwatch.text import iso_utc

_SEVERITY_RANK = {severity: rank for rank, severity in enumerate(Severity)}


def _finding_order(finding: Finding) -> tuple[int, datetime]:
    return (_SEVERITY_RANK[finding.severity], finding.since)


def finding_entry(finding: Finding) -> JsonObject:
    """A finding as the API serves it (the shape ``docs/findings.schema.json``
    describes): ``since`` to the second, in UTC."""
    return {**finding_json(finding), "since": iso_utc(finding.since)}


def sorted_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Critical first, then the oldest problem first."""
    return sorted(findings, key=_finding_order)


def findings_document(board_or_views: Board | Iterable[TargetView]) -> dict[str, Any]:
    """Every active finding, each with the id of the incident it is part of."""
    views = _views(board_or_views)
    findings = [f for view in views for f in view.findings]
    incidents = incident_ids(views)
    document: dict[str, Any] = json_safe(
        {
            "findings": [
                {**finding_entry(f), "incident": incidents.get(f.identity)}
                for f in sorted_findings(findings)
            ]
        }
    )
    return document

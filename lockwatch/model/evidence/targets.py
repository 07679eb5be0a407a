"""The evidence of ``target_down``: a target, or one of its sources, that cannot be sampled."""

from __future__ import annotations

from dataclasses import dataclass

from lockwatch.model.evidence.sessions import FindingFacts


@dataclass(frozen=True, slots=True)
class TargetDownEvidence(FindingFacts):
    error: str  # the whole (secret-free) text
    down_seconds: float


@dataclass(frozen=True, slots=True)
class SourceDownEvidence(FindingFacts):
    source: str
    error: str
    down_seconds: float
    errors_total: int

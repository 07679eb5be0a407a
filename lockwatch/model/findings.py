"""Findings: one problem, now, with what it is about and how bad it is."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


class Severity(enum.StrEnum):
    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"


class Family(enum.StrEnum):
    """The part of lockwatch a finding kind belongs to: the monitor that owns
    it takes every kind of its family."""

    LOCKS = "locks"
    QUEUES = "queues"
    JOBS = "jobs"
    TARGETS = "targets"


class FindingKind(enum.StrEnum):
    """Every kind of finding, each declared once with its family."""

    family: Family

    # Members are made with their family; ``FindingKind("lock_convoy")`` looks
    # one up by value and never reaches this (the default only tells mypy so).
    def __new__(cls, value: str, family: Family | None = None) -> FindingKind:
        assert family is not None, f"finding kind {value!r} needs its family"
        kind = str.__new__(cls, value)
        kind._value_ = value
        kind.family = family
        return kind

    LOCK_HELD_TOO_LONG = ("lock_held_too_long", Family.LOCKS)
    LOCK_CONVOY = ("lock_convoy", Family.LOCKS)
    LOCK_ORPHANED = ("lock_orphaned", Family.LOCKS)
    LOCK_POOLED_SESSION = ("lock_pooled_session", Family.LOCKS)
    LOCK_UNEXPECTED_HOLDER = ("lock_unexpected_holder", Family.LOCKS)
    LEADER_LOCK_MISSING = ("leader_lock_missing", Family.LOCKS)
    QUEUE_GROWING = ("queue_growing", Family.QUEUES)
    QUEUE_STALLED = ("queue_stalled", Family.QUEUES)
    JOB_DUPLICATE_START = ("job_duplicate_start", Family.JOBS)
    JOB_OVERLAP = ("job_overlap", Family.JOBS)
    JOB_MISSED = ("job_missed", Family.JOBS)
    JOB_TOO_LONG = ("job_too_long", Family.JOBS)
    JOB_FAILED = ("job_failed", Family.JOBS)
    TARGET_DOWN = ("target_down", Family.TARGETS)
    TARGET_TRANSACTION_POOLED = ("target_transaction_pooled", Family.TARGETS)

    @classmethod
    def of(cls, family: Family) -> frozenset[FindingKind]:
        """
        >>> sorted(FindingKind.of(Family.QUEUES))
        [<FindingKind.QUEUE_GROWING: 'queue_growing'>, <FindingKind.QUEUE_STALLED: 'queue_stalled'>]
        """
        return frozenset(kind for kind in cls if kind.family is family)


@dataclass(frozen=True, slots=True)
class Subject:
    """What a finding is about. Unused parts stay None."""

    database: str | None = None
    lock: str | None = None  # configured name, or the key as the application wrote it
    queue: str | None = None  # configured queue name
    job: str | None = None  # configured job name
    # A target's own source (``queue/webhooks``), for a target_down that is
    # about that source alone.
    source: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        """``database`` and ``lock`` always (the API's stable shape), the rest when set."""
        extra = {
            name: value
            for name, value in (("queue", self.queue), ("job", self.job), ("source", self.source))
            if value
        }
        return {"database": self.database, "lock": self.lock, **extra}

    def render(self) -> str:
        parts = [p for p in (self.database, self.lock, self.queue, self.job, self.source) if p]
        return "/".join(parts) if parts else "-"


def subject_label(part: str) -> str:
    """The Prometheus label of a subject part. Prometheus owns ``job`` (the
    scrape job), so a subject's job is ``job_name``.

    >>> subject_label("job"), subject_label("queue")
    ('job_name', 'queue')
    """
    return "job_name" if part == "job" else part


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem, now. ``evidence`` holds JSON-ready facts (str, int, float,
    bool, None, lists and dicts of them)."""

    kind: FindingKind
    target: str
    subject: Subject
    severity: Severity
    since: datetime
    summary: str
    evidence: Mapping[str, Any] = field(default_factory=dict)

    @property
    def identity(self) -> tuple[str, str, Subject]:
        """Findings with the same identity are the same ongoing problem."""
        return (self.kind.value, self.target, self.subject)

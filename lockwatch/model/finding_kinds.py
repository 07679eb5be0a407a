"""The kinds of findings, their families and severities, apart from the
findings and their evidence (findings.py): the config's notification routes
(settings/notify.py) and ``lockwatch doctor`` name kinds without building every
kind's evidence classes, which a start would pay for in CPU (issue 32)."""

from __future__ import annotations

import enum


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
    LEADER_LOCK_CHURN = ("leader_lock_churn", Family.LOCKS)
    # A migration tool's lock held past its budget while its session migrates.
    LOCK_MIGRATION_RUNNING = ("lock_migration_running", Family.LOCKS)
    # Waits on locks of other locktypes, each about the session at their root.
    LOCK_QUEUE = ("lock_queue", Family.LOCKS)
    ROW_LOCK_CONVOY = ("row_lock_convoy", Family.LOCKS)
    IDLE_IN_TRANSACTION_BLOCKER = ("idle_in_transaction_blocker", Family.LOCKS)
    QUEUE_GROWING = ("queue_growing", Family.QUEUES)
    QUEUE_STALLED = ("queue_stalled", Family.QUEUES)
    # A queue library's job: the queue monitor reads it with the queue's preset.
    JOB_STUCK_RUNNING = ("job_stuck_running", Family.QUEUES)
    # Its rescuer started it again while the first start's worker lives: two runs.
    JOB_RESCUED_WHILE_RUNNING = ("job_rescued_while_running", Family.QUEUES)
    # Work waits and no consumer of the queue is alive (not a stall: nobody to stall).
    QUEUE_NO_CONSUMER = ("queue_no_consumer", Family.QUEUES)
    # A queue library's job running far past its task's history or its budget.
    QUEUE_JOB_TOO_LONG = ("queue_job_too_long", Family.QUEUES)
    # Completions far below the queue's learned normal while its backlog grows.
    QUEUE_CAPACITY_LOST = ("queue_capacity_lost", Family.QUEUES)
    JOB_DUPLICATE_START = ("job_duplicate_start", Family.JOBS)
    JOB_OVERLAP = ("job_overlap", Family.JOBS)
    JOB_MISSED = ("job_missed", Family.JOBS)
    JOB_TOO_LONG = ("job_too_long", Family.JOBS)
    JOB_FAILED = ("job_failed", Family.JOBS)
    TARGET_DOWN = ("target_down", Family.TARGETS)
    TARGET_TRANSACTION_POOLED = ("target_transaction_pooled", Family.TARGETS)
    TARGET_PRIVILEGES_MISSING = ("target_privileges_missing", Family.TARGETS)

    @classmethod
    def of(cls, family: Family) -> frozenset[FindingKind]:
        """
        >>> sorted(FindingKind.of(Family.TARGETS))
        [<FindingKind.TARGET_DOWN: 'target_down'>, <FindingKind.TARGET_PRIVILEGES_MISSING: 'target_privileges_missing'>, <FindingKind.TARGET_TRANSACTION_POOLED: 'target_transaction_pooled'>]
        """
        return frozenset(kind for kind in cls if kind.family is family)

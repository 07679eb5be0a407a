"""The facts behind findings, one frozen family per kind of problem.

``Evidence`` is what a finding carries: lock facts (with pgbouncer's for a
pooled session, or the count of findings past the cap), waits on locks of
other locktypes with the session at their root, queue facts (with the
lock a stall waits on), job runs, or a target or source that is down.
``json_form`` turns any of them into JSON and back.
"""

from __future__ import annotations

from typing import TypeAlias

from lockwatch.model.evidence.capacity import CapacityEvidence
from lockwatch.model.evidence.jobs import (
    DuplicateStartEvidence,
    FailedRunEvidence,
    JobEvidence,
    LongRunEvidence,
    MissedRunEvidence,
    OverlapEvidence,
    RunFacts,
)
from lockwatch.model.evidence.locks import (
    ChurnEvidence,
    HistoryFacts,
    LockEvidence,
    OverflowEvidence,
)
from lockwatch.model.evidence.long_jobs import LongJobFacts, LongJobsEvidence
from lockwatch.model.evidence.pooler import (
    LinkedClientFacts,
    PooledLockEvidence,
    PoolFacts,
    ServerConnectionFacts,
)
from lockwatch.model.evidence.queues import (
    SESSION_STATES,
    STARVED,
    WAITING,
    ConsumerCount,
    NoConsumerEvidence,
    QueueEvidence,
    QueueLockChain,
    QueueRunFacts,
    QueueStallEvidence,
    RescuedJobFacts,
    RescuedRunsEvidence,
    SessionCounts,
    StuckJobsEvidence,
    WorkerFacts,
)
from lockwatch.model.evidence.sessions import (
    ChainStep,
    FindingFacts,
    HolderFacts,
    LockHolderFacts,
    PooledHolderFacts,
    PreparedFacts,
    SessionFacts,
    WaiterFacts,
)
from lockwatch.model.evidence.targets import (
    PrivilegesMissingEvidence,
    SourceBlocker,
    SourceDownEvidence,
    TargetDownEvidence,
    TransactionPooledEvidence,
)
from lockwatch.model.evidence.waits import LockWaitEvidence, WaitingFacts

Evidence: TypeAlias = (
    LockEvidence
    | PooledLockEvidence
    | ChurnEvidence
    | OverflowEvidence
    | QueueEvidence
    | StuckJobsEvidence
    | RescuedRunsEvidence
    | NoConsumerEvidence
    | LongJobsEvidence
    | CapacityEvidence
    | QueueStallEvidence
    | DuplicateStartEvidence
    | OverlapEvidence
    | MissedRunEvidence
    | LongRunEvidence
    | FailedRunEvidence
    | TargetDownEvidence
    | TransactionPooledEvidence
    | PrivilegesMissingEvidence
    | SourceDownEvidence
    | LockWaitEvidence
)

__all__ = [
    "SESSION_STATES",
    "STARVED",
    "WAITING",
    "CapacityEvidence",
    "ChainStep",
    "ChurnEvidence",
    "ConsumerCount",
    "DuplicateStartEvidence",
    "Evidence",
    "FailedRunEvidence",
    "FindingFacts",
    "HistoryFacts",
    "HolderFacts",
    "JobEvidence",
    "LinkedClientFacts",
    "LockEvidence",
    "LockHolderFacts",
    "LockWaitEvidence",
    "LongJobFacts",
    "LongJobsEvidence",
    "LongRunEvidence",
    "MissedRunEvidence",
    "NoConsumerEvidence",
    "OverflowEvidence",
    "OverlapEvidence",
    "PoolFacts",
    "PooledHolderFacts",
    "PooledLockEvidence",
    "PreparedFacts",
    "PrivilegesMissingEvidence",
    "QueueEvidence",
    "QueueLockChain",
    "QueueRunFacts",
    "QueueStallEvidence",
    "RescuedJobFacts",
    "RescuedRunsEvidence",
    "RunFacts",
    "ServerConnectionFacts",
    "SessionCounts",
    "SessionFacts",
    "SourceBlocker",
    "SourceDownEvidence",
    "StuckJobsEvidence",
    "TargetDownEvidence",
    "TransactionPooledEvidence",
    "WaiterFacts",
    "WaitingFacts",
    "WorkerFacts",
]

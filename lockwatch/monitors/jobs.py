"""A target's jobs: runs read by the job's SQL query or from the ping store,
judged by the job detectors at each poll, and counted for the metrics."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from lockwatch.detect.jobs import detect_jobs, run_key_of
from lockwatch.detect.sources import detect_source_down
from lockwatch.model.findings import Family, FindingKind, Subject
from lockwatch.model.jobs import JobRun, JobView
from lockwatch.monitors.base import (
    MonitorResult,
    PollContext,
    Sampled,
    Stateless,
    undecided_while_down,
)
from lockwatch.sample.base import SampleContext, SampleError, SourceRunner
from lockwatch.sample.jobs import runs_from_rows
from lockwatch.settings.jobs import JobSpec
from lockwatch.settings.targets import Target
from lockwatch.state.jobstore import JobStore
from lockwatch.state.pgstore import StoreError
from lockwatch.state.target_view import TargetView

log = logging.getLogger(__name__)

RECENT_RUNS = 10


@dataclass
class SqlJobSource:
    """Runs from the application's tables, through the target's read-only session."""

    spec: JobSpec

    def sample(self, context: SampleContext) -> list[JobRun]:
        assert self.spec.query is not None
        since = context.now - timedelta(seconds=self.spec.lookback)
        rows = context.database().query(self.spec.query, {"since": since})
        return runs_from_rows(self.spec.name, rows)

    def close(self) -> None:
        return


@dataclass
class StoredJobSource:
    """Runs reported by pings and ``lockwatch exec``."""

    spec: JobSpec
    store: JobStore

    def sample(self, context: SampleContext) -> list[JobRun]:
        try:
            return self.store.runs(
                self.spec.name, context.now - timedelta(seconds=self.spec.lookback)
            )
        except StoreError as exc:
            raise SampleError(str(exc)) from None

    def close(self) -> None:
        return


def _identity(run: JobRun) -> tuple[str, str]:
    return (run.run_id or "", f"{run.started_at.isoformat()}/{run.host or ''}")


@dataclass
class _Tally:
    """Starts and duplicate starts seen since lockwatch started, as counters."""

    seen: dict[tuple[str, str], str] = field(default_factory=dict)  # run -> its run key
    first_of_key: dict[str, tuple[str, str]] = field(default_factory=dict)
    starts_total: int = 0
    duplicates_total: int = 0

    def count(self, spec: JobSpec, runs: Sequence[JobRun], horizon: datetime) -> None:
        for run in sorted(runs, key=lambda r: r.started_at):
            identity = _identity(run)
            if identity in self.seen:
                continue
            key = run_key_of(spec, run)
            self.seen[identity] = key
            self.starts_total += 1
            if key in self.first_of_key:
                self.duplicates_total += 1
            else:
                self.first_of_key[key] = identity
        # Runs older than the look-back will not be reported again: forget them.
        live = {_identity(run) for run in runs if run.started_at >= horizon}
        for identity in [i for i in self.seen if i not in live]:
            key = self.seen.pop(identity)
            if self.first_of_key.get(key) == identity:
                del self.first_of_key[key]


class JobMonitor(Stateless):
    """Samples and judges the jobs whose runs belong to one target."""

    kinds = FindingKind.of(Family.JOBS)

    def __init__(
        self,
        target: Target,
        jobs: Sequence[JobSpec],
        store: JobStore | None,
        *,
        started_at: datetime,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.target = target
        self.started_at = started_at
        self._jobs: list[tuple[JobSpec, SourceRunner[list[JobRun]]]] = []
        for spec in jobs:
            source: SqlJobSource | StoredJobSource
            if spec.query is not None:
                source = SqlJobSource(spec)
            elif store is not None:
                source = StoredJobSource(spec, store)
            else:
                continue
            self._jobs.append(
                (
                    spec,
                    SourceRunner(
                        target.name,
                        f"job/{spec.name}",
                        source,
                        None,
                        target.interval,
                        monotonic=monotonic,
                    ),
                )
            )
        self._runs: dict[str, list[JobRun]] = {}
        self._tallies: dict[str, _Tally] = {spec.name: _Tally() for spec, _ in self._jobs}
        self._views: tuple[JobView, ...] = ()
        self._read: dict[str, list[JobRun] | None] = {}  # this poll's, from sample to judge

    def sample(self, context: PollContext) -> Sampled:
        """Each job's runs, from its query or the pings' store; None for a
        job whose source gave nothing this poll."""
        sampling = SampleContext(context.now, context.db)
        self._read = {spec.name: runner.poll(sampling) for spec, runner in self._jobs}
        return Sampled()

    def judge(self, context: PollContext) -> MonitorResult:
        now = context.now
        findings = []
        undecided: set[tuple[FindingKind, Subject]] = set()
        for spec, runner in self._jobs:
            runs = self._read.get(spec.name)
            if runs is None:
                undecided |= undecided_while_down(
                    runner.health, [Subject(job=spec.name)], self.kinds
                )
                if not runner.health.up:
                    continue
                runs = self._runs.get(spec.name, [])
            self._runs[spec.name] = runs
            self._tallies[spec.name].count(spec, runs, now - timedelta(seconds=spec.lookback))
            # Pinged history begins when lockwatch began receiving it; a query
            # reads the application's own, complete history.
            not_before = (
                self.started_at if spec.query is None else now - timedelta(seconds=spec.lookback)
            )
            findings.extend(
                detect_jobs(spec, runs, now, target=self.target.name, not_before=not_before)
            )
        findings.extend(
            detect_source_down(self.target.name, [r.health for _, r in self._jobs], now)
        )
        self._views = tuple(self._view(spec, now) for spec, _ in self._jobs)
        return MonitorResult(tuple(findings), frozenset(undecided))

    def _view(self, spec: JobSpec, now: datetime) -> JobView:
        runs = sorted(self._runs.get(spec.name, []), key=lambda r: r.started_at, reverse=True)
        finished = [r for r in runs if r.finished_at is not None]
        succeeded = [r for r in finished if r.status.value == "success"]
        last_finished = max(finished, key=lambda r: r.finished_at or now, default=None)
        tally = self._tallies[spec.name]
        return JobView(
            name=spec.name,
            source="sql" if spec.query is not None else "ping",
            starts_total=tally.starts_total,
            duplicate_starts_total=tally.duplicates_total,
            running=sum(1 for r in runs if r.running),
            last_start=runs[0].started_at if runs else None,
            last_success=max((r.finished_at for r in succeeded if r.finished_at), default=None),
            last_duration=None
            if last_finished is None or last_finished.finished_at is None
            else (last_finished.finished_at - last_finished.started_at).total_seconds(),
            recent=tuple(runs[:RECENT_RUNS]),
        )

    def publish(self, view: TargetView) -> TargetView:
        return replace(
            view,
            jobs=self._views,
            sources=(*view.sources, *(runner.health for _, runner in self._jobs)),
        )

    def close(self) -> None:
        for _, runner in self._jobs:
            runner.close()

"""The ``jobs`` and ``pings`` sections, and a target's ``pgbouncer``.

Part of the config loader (``config.py`` hands over its loader): every
problem is collected with its file, line and dotted path; the ping token and
the DSNs never appear in a message.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from lockwatch.config.loader import _check_name, _child, _positive
from lockwatch.settings.jobs import JobSpec, PingSettings
from lockwatch.settings.pooler import PoolerSpec
from lockwatch.settings.schedule import Schedule, check_cron

if TYPE_CHECKING:
    from lockwatch.config.loader import _Loader

_JOB_KEYS = ("name", "target", "schedule", "max_duration", "lookback", "event_ttl", "query")
_SCHEDULE_KEYS = ("cron", "timezone", "grace")
_PING_KEYS = ("token", "token_file", "store", "dsn", "dsn_file", "table")
_POOLER_KEYS = ("dsn", "dsn_file")
_STORES = ("sqlite", "postgres")
_TABLE = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_TOKEN_MIN = 16
_DEFAULT_JOB = JobSpec("")
_DEFAULT_GRACE = Schedule("* * * * *").grace


def _check_token(token: str) -> str | None:
    if len(token) < _TOKEN_MIN:
        return f"too short: use at least {_TOKEN_MIN} random characters (the value is not shown)"
    return None


def _check_table(name: str) -> str | None:
    return None if _TABLE.fullmatch(name) else f"not a plain lower-case table name: {name!r}"


def _check_store(store: str) -> str | None:
    return None if store in _STORES else f"expected one of {', '.join(_STORES)}, got {store!r}"


class JobConfig:
    """Reads jobs, pings and poolers through the config loader."""

    def __init__(self, loader: _Loader) -> None:
        self.loader = loader
        self.r = loader.r

    def pgbouncer(self, node: yaml.Node, path: str) -> PoolerSpec | None:
        entries = self.r.mapping(node, path, _POOLER_KEYS)
        if entries is None:
            return None
        dsn = self.loader.dsn(entries, node, path)
        return None if dsn is None else PoolerSpec(dsn)

    def pings(self, node: yaml.Node, path: str) -> PingSettings:
        entries = self.r.mapping(node, path, _PING_KEYS)
        if entries is None:
            return PingSettings()
        token = self.r.secret(entries, node, path, "token", _check_token)
        store = "sqlite"
        if "store" in entries:
            store = self.r.text(entries["store"], _child(path, "store"), _check_store) or store
        store_dsn = None
        if store == "postgres":
            store_dsn = self.loader.dsn(entries, node, path)
        elif "dsn" in entries or "dsn_file" in entries:
            self.r.report(path, node, "a dsn is only for store: postgres")
        table = "lockwatch_job_runs"
        if "table" in entries:
            table = self.r.text(entries["table"], _child(path, "table"), _check_table) or table
        return PingSettings(token=token, store_dsn=store_dsn, table=table)

    def jobs(
        self,
        node: yaml.Node,
        path: str,
        targets: Collection[str],
        pings: PingSettings,
        state_dir: Path | None,
    ) -> tuple[JobSpec, ...]:
        jobs = []
        names: dict[str, str] = {}
        for item_path, item in self.r.items(node, path):
            job = self.job(item, item_path, names, targets)
            if job is None:
                continue
            jobs.append(job)
            if job.query is not None:
                continue
            # Without a query, the job's runs can only come from pings.
            if pings.token is None:
                self.r.report(
                    item_path,
                    item,
                    "has no query, so its runs come from pings: set pings.token (or pings.token_file)",
                )
            elif pings.store_dsn is None and state_dir is None:
                self.r.report(
                    item_path,
                    item,
                    "pinged runs are kept in state_dir: set state_dir, or pings.store: postgres",
                )
        return tuple(jobs)

    def job(
        self, node: yaml.Node, path: str, names: dict[str, str], targets: Collection[str]
    ) -> JobSpec | None:
        entries = self.r.mapping(node, path, _JOB_KEYS, required=("name",))
        if entries is None:
            return None
        # Job names go into ping URLs and metric labels: the target-name rules fit.
        name = self.loader.name(entries, path, names)
        target = self.target(entries, node, path, targets)
        schedule = None
        if "schedule" in entries:
            schedule = self.schedule(entries["schedule"], _child(path, "schedule"))
        durations = {}
        for key in ("max_duration", "lookback", "event_ttl"):
            if key in entries:
                seconds = self.r.duration(entries[key], _child(path, key), _positive)
                if seconds is not None:
                    durations[key] = seconds
        query = None
        if "query" in entries:
            query = self.r.text(entries["query"], _child(path, "query"))
        if name is None or target is None:
            return None
        return JobSpec(
            name=name,
            schedule=schedule,
            max_duration=durations.get("max_duration", _DEFAULT_JOB.max_duration),
            lookback=durations.get("lookback", _DEFAULT_JOB.lookback),
            event_ttl=durations.get("event_ttl", _DEFAULT_JOB.event_ttl),
            target=target,
            query=query,
        )

    def target(
        self, entries: Mapping[str, yaml.Node], node: yaml.Node, path: str, targets: Collection[str]
    ) -> str | None:
        if "target" not in entries:
            if len(targets) == 1:
                return next(iter(targets))
            self.r.report(
                path, node, f"missing required key 'target' (one of: {', '.join(sorted(targets))})"
            )
            return None
        where = _child(path, "target")
        target = self.r.text(entries["target"], where, _check_name)
        if target is not None and target not in targets:
            self.r.report(
                where,
                entries["target"],
                f"no target named {target!r} (targets: {', '.join(sorted(targets))})",
            )
            return None
        return target

    def schedule(self, node: yaml.Node, path: str) -> Schedule | None:
        entries = self.r.mapping(node, path, _SCHEDULE_KEYS, required=("cron",))
        if entries is None or "cron" not in entries:
            return None
        cron = self.r.text(entries["cron"], _child(path, "cron"))
        timezone = "UTC"
        if "timezone" in entries:
            timezone = self.r.text(entries["timezone"], _child(path, "timezone")) or timezone
        grace = _DEFAULT_GRACE
        if "grace" in entries:
            grace = self.r.duration(entries["grace"], _child(path, "grace"), _positive) or grace
        if cron is None:
            return None
        problem = check_cron(cron, timezone)
        if problem is not None:
            key = "timezone" if problem.startswith("unknown time zone") else "cron"
            self.r.report(_child(path, key), entries[key], problem)
            return None
        return Schedule(cron, timezone, grace)

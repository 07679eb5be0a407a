"""The battery's table: every case it must run, what each run measured, and
the markdown that goes to the terminal and to docs/reliability.md.

Each test records its case with the numbers it measured; a case whose test
failed shows FAILED, one that did not run shows "not run". A test run never
writes the tracked doc: a run in which every case ran and passed keeps its
table in ``LAST_RUN`` (under the ignored .pytest_cache), and

    python -m tests.battery.report --write

puts that table into docs/reliability.md. tests/unit/test_battery_table.py
checks that the committed table has every case, in order, all passed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from tests.fixtures.paths import ROOT

DOC = ROOT / "docs" / "reliability.md"
# The last complete run's table: ignored by git, read by --write.
LAST_RUN = ROOT / ".pytest_cache" / "lockwatch-battery.json"
BEGIN = "<!-- begin: written by the battery (tests/battery) -->"
END = "<!-- end: written by the battery -->"
TABLE = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)


def soak() -> bool:
    """Long variants: LOCKWATCH_SOAK=1 (minutes per case instead of seconds)."""
    return os.environ.get("LOCKWATCH_SOAK", "") not in ("", "0")


@dataclass(frozen=True, slots=True)
class Case:
    id: str
    area: str  # fault, load, hostile
    name: str


CASES = (
    Case("pg-restart", "fault", "PostgreSQL restarted"),
    Case("pg-kill", "fault", "PostgreSQL killed (SIGKILL)"),
    Case("pg-silent", "fault", "PostgreSQL unreachable, connection left open"),
    Case("pgbouncer-down", "fault", "pgbouncer goes away and comes back"),
    Case("pool-exhausted", "fault", "pgbouncer with an exhausted pool"),
    Case("redis-down", "fault", "Redis goes away and comes back"),
    Case("prometheus-down", "fault", "Prometheus worker source goes away and comes back"),
    Case("receiver-down", "fault", "Notification receiver hangs, refuses, errors"),
    Case("state-dir-full", "fault", "State dir full"),
    Case("state-dir-readonly", "fault", "State dir unwritable"),
    Case("lockwatch-kill", "fault", "lockwatch SIGKILLed mid-incident"),
    Case("key-churn", "load", "Distinct advisory lock keys taken and released"),
    Case("locks-held", "load", "Advisory locks held at once"),
    Case("slow-pg-locks", "load", "pg_locks query gets slow"),
    Case("big-convoy", "load", "A convoy of 2,000 waiters on one key"),
    Case("finding-flood", "load", "50,000 locks past their budget, HTTP readers hammering"),
    Case("many-targets", "load", "Many targets at a 1 s interval"),
    Case("hostile-values", "hostile", "Hostile client values"),
    Case("invalid-utf8", "hostile", "Invalid UTF-8 in application_name"),
    Case("untracked-activity", "hostile", "Hostile names in the log, track_activities off"),
    Case("ping-api", "hostile", "Hostile ping API clients"),
    Case("slow-loris", "hostile", "Slow-loris clients"),
    Case("least-privilege", "hostile", "pg_monitor-only role"),
    Case("weak-role", "hostile", "A role without pg_monitor"),
    Case("secrets", "hostile", "Secrets in every output"),
    Case("web-config", "hostile", "TLS and basic auth (web-config file)"),
    Case("cap-reshuffle", "load", "A key of a holder with 101 locks turns critical"),
    Case("holder-behind-holder", "load", "A 10-lock session beside a 150-lock one"),
    Case("ten-leaking-sessions", "load", "10 sessions with 5,000 orphaned locks each"),
    Case("target-removed", "fault", "A target removed by reload or while stopped"),
    Case("receiver-slow", "fault", "A receiver slower than the read timeout"),
    Case("receiver-trickle", "fault", "A receiver that trickles its answer"),
    Case("exec-trickle", "fault", "lockwatch exec against a trickling endpoint"),
    Case("telegram-not-json", "fault", "Telegram answers 200 with a body that is not its JSON"),
    Case("state-dir-shared", "fault", "A second lockwatch on the same state dir"),
    Case("state-unreadable", "fault", "State files that cannot be read; temporary files left"),
    Case("ping-framing", "hostile", "POST /ping bodies framed every way"),
    Case("dsn-misread", "hostile", "A DSN password libpq would misread; a short password"),
    Case("xact-locks", "semantics", "Transaction-level locks in short transactions"),
    Case("prepared-xact", "semantics", "Locks held by a prepared (two-phase) transaction"),
    Case("clocks", "fault", "lockwatch's clock skewed or jumping against the server's"),
    Case("fleet-withdrawn", "fault", "An unreachable fleet withdrawn, then lockwatch stopped"),
    Case("sd-hostile", "hostile", "http_sd answers nested 100,000 deep, or endless"),
    Case("auth-timing", "hostile", "Basic auth timed: a known user against an unknown one"),
    Case("learned-budget", "hostile", "A learned budget taught to wait, hold by hold"),
    Case("snapshot-blind", "hostile", "lockwatch snapshot through a role without pg_monitor"),
    Case("metrics-gzip", "load", "/metrics to a scraper that accepts gzip"),
    Case("unreadable-copies", "fault", "A state file damaged at every start"),
    Case("dsn-at-commands", "hostile", "doctor, snapshot and demo given a password with an '@'"),
    Case("serverless-named", "hostile", "A serverless target's convoy of clients named lockwatch"),
    Case("history-rights", "fault", "An incident history store the role cannot write"),
    Case("history-replicas", "fault", "Two replicas sharing the incident history"),
    Case("notify-reload", "fault", "A notify change applied by SIGHUP"),
    Case("mixed-readers", "load", "Eight mixed readers at a 2 s interval"),
    Case("big-flood", "load", "200,000 locks past their budget"),
)
CASE_IDS = frozenset(case.id for case in CASES)


@dataclass(slots=True)
class Row:
    case: Case
    injected: str
    did: str
    intact: str  # nothing lost, leaked, doubled or let through: yes/no with numbers
    nodeid: str
    status: str = "running"  # passed, FAILED


@dataclass
class Results:
    rows: dict[str, Row] = field(default_factory=dict)
    started: datetime = field(default_factory=lambda: datetime.now(UTC))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, case_id: str, nodeid: str, injected: str, did: str, intact: str) -> None:
        if case_id not in CASE_IDS:
            raise KeyError(f"no battery case {case_id!r} in tests/battery/report.py CASES")
        case = next(c for c in CASES if c.id == case_id)
        with self._lock:
            self.rows[case_id] = Row(case, injected, did, intact, nodeid)

    def finished(self, nodeid: str, passed: bool) -> None:
        with self._lock:
            for row in self.rows.values():
                if row.nodeid == nodeid and row.status == "running":
                    row.status = "passed" if passed else "FAILED"

    def dump(self) -> list[dict[str, str]]:
        """The rows as plain values: an xdist worker hands them to the controller."""
        with self._lock:
            return [
                {"case": case_id, "injected": row.injected, "did": row.did,
                 "intact": row.intact, "nodeid": row.nodeid, "status": row.status}
                for case_id, row in self.rows.items()
            ]  # fmt: skip

    def merge(self, dumped: list[dict[str, str]]) -> None:
        """Another worker's rows (``dump``), into this run's table."""
        for item in dumped:
            self.record(item["case"], item["nodeid"], item["injected"], item["did"], item["intact"])
            with self._lock:
                self.rows[item["case"]].status = item["status"]

    def complete(self) -> bool:
        """Every case ran and passed: the table may replace the doc's."""
        return self.rows.keys() == CASE_IDS and all(
            row.status == "passed" for row in self.rows.values()
        )

    def table(self) -> str:
        lines = [
            "| | case | injected | what lockwatch did | nothing lost |",
            "|---|---|---|---|---|",
        ]
        for case in CASES:
            row = self.rows.get(case.id)
            if row is None:
                lines.append(f"| {case.area} | {case.name} | not run | | |")
                continue
            name = case.name if row.status == "passed" else f"{case.name} ({row.status})"
            cells = (case.area, name, row.injected, row.did, row.intact)
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        return "\n".join(lines)

    def block(self) -> str:
        """The doc's table with the line that says which run made it."""
        mode = "soak (LOCKWATCH_SOAK=1)" if soak() else "CI sizes"
        return (
            f"{BEGIN}\n"
            f"Run of {self.started:%Y-%m-%d %H:%M} UTC, {mode}, "
            f"{os.cpu_count()} cores.\n\n{self.table()}\n{END}"
        )

    def keep(self, path: Path = LAST_RUN) -> None:
        """Keep a complete run's table for ``--write``; never the tracked doc."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"block": self.block()}), encoding="utf-8")


def doc_cases(text: str) -> list[tuple[str, str]]:
    """The (area, case) of each row of the doc's battery table, in order; a
    case that failed or did not run keeps its mark in the name.

    >>> doc_cases(f"{BEGIN}\\n| | case | a | b | c |\\n|---|\\n| fault | X (FAILED) | 1 | 2 | 3 |\\n{END}")
    [('fault', 'X (FAILED)')]
    """
    found = TABLE.search(text)
    if found is None:
        raise ValueError(f"no {BEGIN} ... {END} markers for the table")
    rows = [line for line in found.group(0).splitlines() if line.startswith("| ")]
    cells = [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in rows[1:]]
    return [(row[0], "not run" if row[2] == "not run" else row[1]) for row in cells]


def expected_cases() -> list[tuple[str, str]]:
    """What a complete run's table lists: every case, in order, passed."""
    return [(case.area, case.name) for case in CASES]


def write_doc(block: str, path: Path = DOC) -> None:
    text = path.read_text(encoding="utf-8")
    if not TABLE.search(text):
        raise RuntimeError(f"{path} has no {BEGIN} ... {END} markers for the table")
    path.write_text(TABLE.sub(lambda _: block, text), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.battery.report",
        description="Write the last complete battery run's table into docs/reliability.md.",
    )
    parser.add_argument("--write", action="store_true", help="write docs/reliability.md")
    args = parser.parse_args(argv)
    if not LAST_RUN.exists():
        print(
            f"no complete battery run kept in {LAST_RUN}: run `bash scripts/test` or "
            "`.venv/bin/pytest tests/battery` first (every case must run and pass)",
            file=sys.stderr,
        )
        return 1
    block = str(json.loads(LAST_RUN.read_text(encoding="utf-8"))["block"])
    if not args.write:
        print(block)
        return 0
    write_doc(block, DOC)
    print(f"wrote the table of the last complete run to {DOC}")
    return 0


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


if __name__ == "__main__":
    sys.exit(main())

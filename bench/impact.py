"""``python -m bench.impact``: what watching costs the watched database's own
clients. pgbench (select-only and TPC-B-like, at 8 and 64 clients) on the
same host as PostgreSQL 15 and 18, with 0 and 10,000 advisory locks held and
``max_locks_per_transaction`` at 64 and 1,024, in arms interleaved round by
round (the order turning): no monitor, ``lockwatch run`` polling every 1 s
and every 10 s, postgres_exporter scraped every 1 s, and the floor's own
statement every 1 s from a client with no work of its own (see
bench/watchers.py). Each arm's TPS, p99 and p99.9 are compared with the
no-monitor arm of the same round; pg_stat_activity is sampled throughout
for the lock-manager waits each poll causes (bench/waits.py); the machine's
load is read with every arm (bench/machine.py).

Written to docs/benchmarks.md between its own markers (``--no-write`` only
prints); ``--quick`` measures one cell for two rounds.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from bench import pgbench
from bench.impact_cells import QUICK, SETTLE, ArmRound, Cell, CellRun, ImpactRun, Options
from bench.impact_report import BEGIN, END, render
from bench.machine import Machine
from bench.markdown import DOC, write_into
from bench.server import SETTINGS, BenchServer, lock_sizes
from bench.waits import WaitSampler
from bench.watchers import ARMS, EVERY_ARM, NONE, ROLES, Watcher, watchers
from lockwatch.demo.pgcluster import ClusterError

# Room for 64 clients, the lock holders and the monitors; the shared lock
# table holds max_locks_per_transaction x (max_connections + the server's own
# processes): 64 x about 220 leaves room for 10,000 advisory locks.
MAX_CONNECTIONS = "200"


@dataclass
class Bench:
    """What a cell's arms run against: the server, its monitors, the wait
    sampler and the machine's readings."""

    server: BenchServer
    watchers: Mapping[str, Watcher]
    sampler: WaitSampler
    machine: Machine
    workdir: Path
    settle: float = SETTLE


def _arm(bench: Bench, arm: str, cell: Cell, seconds: float, prefix: Path) -> ArmRound:
    watcher = bench.watchers[arm]
    role = ROLES.get(arm)
    watcher.on()
    try:
        if arm != NONE:
            time.sleep(bench.settle)
        cpu, totals = watcher.cpu(), bench.server.statement_totals()
        machine, started = bench.machine.start(), time.monotonic()
        run = pgbench.run_pgbench(bench.server, cell.workload, cell.clients, seconds, prefix)
        ended = time.monotonic()
        spent = watcher.cpu() - cpu
        server_ms = 0.0 if role is None else bench.server.spent_since(totals)[role].exec_ms
    finally:
        watcher.off()
    window = ended - started
    return ArmRound(
        arm=arm,
        tps=run.tps,
        p50=run.quantile(0.5),
        p99=run.quantile(0.99),
        p999=run.quantile(0.999),
        cpu_ms_per_s=spent * 1000 / window,
        server_ms_per_s=server_ms / window,
        waits=bench.sampler.between(started, ended),
        load=bench.machine.since(machine),
    )


def measure_cell(
    bench: Bench,
    cell: Cell,
    rounds: int,
    seconds: float,
    say: Callable[[str], None] = lambda _: None,
) -> CellRun:
    """``rounds`` rounds of every arm of ``bench`` in ``cell``, the order
    turning from round to round so that no arm always follows another."""
    arms = tuple(bench.watchers)
    logs = bench.workdir / "pgbench"
    logs.mkdir(exist_ok=True)
    results: list[tuple[ArmRound, ...]] = []
    for round_ in range(rounds):
        say(f"    round {round_ + 1} of {rounds}")
        turn = round_ % len(arms)
        done = {
            arm: _arm(bench, arm, cell, seconds, logs / f"r{round_}")
            for arm in (*arms[turn:], *arms[:turn])
        }
        results.append(tuple(done[arm] for arm in arms))
    return CellRun(cell, bench.server.version, arms, tuple(results), seconds)


def server_settings(max_locks: int) -> dict[str, str]:
    return {
        **SETTINGS,
        "max_locks_per_transaction": str(max_locks),
        "max_connections": MAX_CONNECTIONS,
    }


def _server_cells(
    options: Options, postgres: int, max_locks: int, workdir: Path, say: Callable[[str], None]
) -> list[CellRun]:
    found = []
    with BenchServer(workdir, postgres, server_settings(max_locks)) as server:
        say(f"PostgreSQL {server.version}, max_locks_per_transaction {max_locks}")
        pgbench.initialise(server, options.scale)
        monitors = {ROLES[arm] for arm in options.arms if arm in ROLES}
        with (
            watchers(server, options.arms, workdir) as watching,
            WaitSampler(server, sorted(monitors), options.every) as sampler,
        ):
            bench = Bench(
                server, watching, sampler, Machine(server.cluster.postmaster_pid), workdir
            )
            bench.settle = options.settle
            for locks in options.locks:
                if locks < server.locks_held:
                    server.release_locks()
                server.hold_locks(locks)
                for watcher in watching.values():
                    watcher.refresh()
                for workload in options.workloads:
                    for clients in options.clients:
                        cell = Cell(postgres, workload, clients, locks, max_locks)
                        say(f"  {workload}, {clients} clients, {locks:,} locks")
                        found.append(
                            measure_cell(bench, cell, options.rounds, options.seconds, say)
                        )
    return found


def run(options: Options, workdir: Path, say: Callable[[str], None] = lambda _: None) -> ImpactRun:
    started, clock = datetime.now(UTC), time.monotonic()
    cells: list[CellRun] = []
    for postgres in options.postgres:
        for max_locks in options.max_locks:
            cells.extend(_server_cells(options, postgres, max_locks, workdir, say))
    return ImpactRun(options, started, time.monotonic() - clock, tuple(cells))


def _names(allowed: tuple[str, ...]) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(part.strip() for part in text.split(","))
        unknown = [name for name in names if name not in allowed]
        if unknown:
            raise argparse.ArgumentTypeError(f"not one of {', '.join(allowed)}: {unknown}")
        return names

    return parse


def parse(argv: list[str]) -> tuple[Options, Path | None]:

    defaults = Options()
    parser = argparse.ArgumentParser(prog="python -m bench.impact", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one cell, two rounds (a smoke run)")
    parser.add_argument("--postgres", type=lock_sizes, help="PostgreSQL majors [15,18]")
    parser.add_argument("--workloads", type=_names(pgbench.WORKLOADS), help="pgbench's built-ins")
    parser.add_argument("--clients", type=lock_sizes, help="pgbench clients [8,64]")
    parser.add_argument("--locks", type=lock_sizes, help="advisory locks held [0,10000]")
    parser.add_argument("--max-locks", type=lock_sizes, help="max_locks_per_transaction [64,1024]")
    parser.add_argument(
        "--arms",
        type=_names(EVERY_ARM),
        help=f"the arms, {NONE!r} first [{', '.join(ARMS)}]; also: {EVERY_ARM[-1]!r}",
    )
    parser.add_argument("--rounds", type=int, help=f"rounds of every arm [{defaults.rounds}]")
    parser.add_argument("--seconds", type=float, help=f"each arm's window [{defaults.seconds:g}]")
    parser.add_argument("--scale", type=int, help=f"pgbench's scale [{defaults.scale}]")
    parser.add_argument("--output", type=Path, default=DOC, help="where the tables go")
    parser.add_argument("--no-write", action="store_true", help="only print the tables")
    args = parser.parse_args(argv)
    options = QUICK if args.quick else defaults
    changes = {
        name: getattr(args, name)
        for name in ("postgres", "workloads", "clients", "locks", "max_locks", "arms")
        if getattr(args, name) is not None
    }
    changes |= {
        name: getattr(args, name)
        for name in ("rounds", "seconds", "scale")
        if getattr(args, name) is not None
    }
    options = replace(options, **changes)
    if options.arms[0] != NONE:
        parser.error(f"--arms must start with {NONE!r}: the others are compared with it")
    return options, None if args.no_write else args.output


def main(argv: list[str]) -> None:

    options, output = parse(argv)
    minutes = options.estimate() / 60
    print(
        f"{options.cells} cells x {options.rounds} rounds x {len(options.arms)} arms: "
        f"about {minutes:.0f} minutes of arms",
        file=sys.stderr,
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="lockwatch-bench-impact-") as workdir:
        try:
            result = run(
                options, Path(workdir), lambda line: print(line, file=sys.stderr, flush=True)
            )
        except (RuntimeError, ClusterError) as exc:
            sys.exit(f"bench.impact: {exc}")
    text = render(result, " ".join(["python -m bench.impact", *argv]))
    print(text)
    if output is not None:
        write_into(output, text, BEGIN, END)
        print(f"written to {output}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])

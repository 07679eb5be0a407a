"""``python -m bench.impact``'s figures as markdown (and the section of
``python -m bench`` that runs one cell of it)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from bench.impact_cells import ArmRound, CellRun, ImpactRun
from bench.markdown import Spread, ms, ratio, spread, table
from bench.watchers import EXPORTER, LOCKWATCH, NONE

BEGIN = "<!-- begin: written by python -m bench.impact -->"
END = "<!-- end: written by python -m bench.impact -->"
TPS_TARGET = 0.98  # lockwatch at 1 s keeps at least this share of no monitor's TPS
P999_TARGET = 1.15  # and its p99.9 within this of no monitor's
# (name in ArmRound, heading, whether more is worse)
FIGURES = (("tps", "TPS", False), ("p99", "p99 ms", True), ("p999", "p99.9 ms", True))


def _worse(values: Sequence[float], higher_is_worse: bool) -> int:
    return sum(1 for v in values if (v > 1 if higher_is_worse else v < 1))


def _figure(run: CellRun, arm: str, name: str, higher_is_worse: bool) -> str:
    value = statistics.median(float(getattr(r, name)) for r in run.of(arm))
    shown = f"{value:,.0f}" if name == "tps" else ms(value)
    if arm == NONE:
        return shown
    ratios = run.ratios(arm, name)
    worse = _worse(ratios, higher_is_worse)
    return f"{shown}, {spread(Spread.of(ratios), ratio)}, {worse}/{len(ratios)}"


def _median(rounds: Sequence[ArmRound], value: str) -> float:
    return statistics.median(float(getattr(r, value)) for r in rounds)


def _waits(rounds: Sequence[ArmRound]) -> str:
    waiting = statistics.median(r.waits.waiting_ms_per_s for r in rounds)
    caused = statistics.median(r.waits.caused_ms_per_s for r in rounds)
    return f"{ms(waiting)}, {ms(caused)}"


def _cell(run: CellRun) -> list[str]:
    c = run.cell
    return [run.version, c.workload, str(c.clients), f"{c.locks:,}", f"{c.max_locks:,}"]


CELL = ["PostgreSQL", "workload", "clients", "locks", "max_locks"]


def arms_table(cells: Sequence[CellRun]) -> list[str]:
    rows = []
    for run in cells:
        for arm in run.arms:
            rounds = run.of(arm)
            monitored = arm != NONE
            rows.append(
                [
                    *_cell(run),
                    arm,
                    *(_figure(run, arm, name, worse) for name, _, worse in FIGURES),
                    ms(_median(rounds, "cpu_ms_per_s")) if monitored else "",
                    ms(_median(rounds, "server_ms_per_s")) if monitored else "",
                    _waits(rounds),
                ]
            )
    return table(
        [
            *CELL,
            "arm",
            *(heading for _, heading, _ in FIGURES),
            "monitor CPU ms/s",
            "monitor server ms/s",
            "LockManager waits ms/s: all, the polls'",
        ],
        rows,
    )


def _met(run: CellRun) -> str:
    tps = statistics.median(run.ratios(LOCKWATCH, "tps"))
    p999 = statistics.median(run.ratios(LOCKWATCH, "p999"))
    misses = []
    if tps < TPS_TARGET:
        misses.append(f"TPS -{(1 - tps) * 100:.1f}%")
    if p999 > P999_TARGET:
        misses.append(f"p99.9 {ratio(p999)}")
    if EXPORTER in run.arms:
        if p999 > statistics.median(run.ratios(EXPORTER, "p999")):
            misses.append("p99.9 above the exporter's")
        if tps < statistics.median(run.ratios(EXPORTER, "tps")):
            misses.append("TPS below the exporter's")
    return "yes" if not misses else "no: " + ", ".join(misses)


def targets_table(cells: Sequence[CellRun]) -> list[str]:
    shown = [run for run in cells if LOCKWATCH in run.arms]
    others = [arm for arm in (shown[0].arms if shown else ()) if arm not in (NONE, LOCKWATCH)]
    rows = []
    for run in shown:
        p999 = run.ratios(LOCKWATCH, "p999")
        rows.append(
            [
                *_cell(run),
                spread(Spread.of(run.ratios(LOCKWATCH, "tps")), ratio),
                spread(Spread.of(p999), ratio),
                f"{_worse(p999, True)} of {len(p999)}",
                *(ratio(statistics.median(run.ratios(arm, "p999"))) for arm in others),
                _met(run),
            ]
        )
    return table(
        [
            *CELL,
            "TPS",
            "p99.9",
            "p99.9 worse than none",
            *(f"{arm}: p99.9" for arm in others),
            "targets met",
        ],
        rows,
    )


# Other processes' CPU (% of the machine) past which a run says it was busy.
BUSY_PERCENT = 10.0


def load_line(cells: Sequence[CellRun]) -> str:
    rounds = [arm for run in cells for arms in run.rounds for arm in arms]
    if not rounds:
        return ""
    load = Spread.of([r.load.load1 for r in rounds])
    others = Spread.of([r.load.others_percent for r in rounds])
    line = (
        f"The machine: load average {load.median:.1f} [{load.low:.1f}-{load.high:.1f}] "
        f"over the arms, other processes' CPU {others.median:.0f} % "
        f"[{others.low:.0f}-{others.high:.0f} %] of its cores."
    )
    if others.median > BUSY_PERCENT:
        line += (
            " It was busy: other work took CPU from pgbench and the monitors alike, and the "
            "ratios' ranges say as much about that work as about the monitors."
        )
    return line


def describe(cells: Sequence[CellRun]) -> str:
    rounds = len(cells[0].rounds) if cells else 0
    seconds = cells[0].seconds if cells else 0.0
    return (
        f"pgbench beside each monitor, {rounds} rounds of a {seconds:g} s window per arm, "
        "the arms' order turning from round to round. Each figure is the median over the "
        "rounds; a monitor's is followed by its ratio to the no-monitor arm of the same "
        "round, median [min-max], and the rounds it was worse in. Monitor CPU and server "
        "time (pg_stat_statements) per second of the window; LockManager waits: pgbench's "
        "sessions seen waiting on `LWLock:LockManager` in pg_stat_activity (sampled every "
        "10 ms), as session-ms per second, all of them and the excess in samples taken "
        "while a monitor's statement ran. Targets for lockwatch at 1 s: TPS at least "
        f"{TPS_TARGET:.2f}x, p99.9 within {P999_TARGET}x of no monitor, and no worse than "
        "postgres_exporter at the same rate."
    )


def cell_section(run: CellRun) -> list[str]:
    """``python -m bench``'s section: one cell."""
    return [
        "### pgbench beside the monitors",
        "",
        describe([run]),
        "",
        *targets_table([run]),
        "Every arm:",
        "",
        *arms_table([run]),
        load_line([run]),
        "",
    ]


def render(result: ImpactRun, command: str) -> str:
    hours, rest = divmod(round(result.seconds), 3600)
    versions = sorted({run.version for run in result.cells})
    lines = [
        f"Measured {result.started:%Y-%m-%d %H:%M} UTC with `{command}` in "
        f"{hours}h{rest // 60:02d}m: PostgreSQL {', '.join(versions)}.",
        "",
        "### The observer effect",
        "",
        describe(result.cells),
        "",
        load_line(result.cells),
        "",
        "lockwatch at 1 s against no monitor, and the other monitors' p99.9 ratios:",
        "",
        *targets_table(result.cells),
        "Every arm:",
        "",
        *arms_table(result.cells),
    ]
    return "\n".join(lines).rstrip() + "\n"

"""``python -m bench.impact_pool [FILE ...]``: every cell that ``python -m
bench.impact`` has published, taken together.

One run measures a few cells, and a cell's figures move from round to round by
more than the targets' margins; what holds across all the cells measured is
what tells lockwatch's cost from noise. This reads the "Every arm" tables
(``impact_report.arms_table``) from ``docs/benchmarks.md`` (or the files
given), keeps each cell's last published row per arm from runs of 16
rounds or more, and prints per arm the
median over the cells of its TPS and p99.9 ratios to no monitor, how many
cells miss the targets, and how often lockwatch at 1 s did worse than
postgres_exporter and than the floor, with the sign test's chance of that
many if the two cost the same.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from math import comb
from pathlib import Path

from bench.impact_report import CELL, P999_TARGET, TPS_TARGET
from bench.markdown import DOC, Spread, ratio, spread, table
from bench.watchers import ARMS, EXPORTER, FLOOR, LOCKWATCH, NONE

Ratios = tuple[float, float]  # an arm's TPS and p99.9, each a median ratio to no monitor
Cells = Mapping[tuple[str, ...], Mapping[str, Ratios]]
# "6,733, 0.99x [0.89x-1.32x], 9/16": the figure, its ratio's median, and of
# how many rounds.
_RATIO = re.compile(r"^[\d.,]+, (?P<median>[\d.]+)x \[.*\], \d+/(?P<rounds>\d+)$")
# Fewer rounds than issue 29 asks of a run leave a cell out (an earlier
# 8-round run is published too).
MIN_ROUNDS = 16


def read_cells(lines: Iterable[str]) -> dict[tuple[str, ...], dict[str, Ratios]]:
    """Each cell's arms, from the rows of every "Every arm" table.

    >>> row = "| 18.6 | tpcb-like | 8 | 0 | 64 | lockwatch 1 s | 6,169, 0.97x [0.87x-1.27x], 11/16 "
    >>> row += "| 3.63, 0.99x [0.71x-1.40x], 7/16 | 7.50, 0.96x [0.39x-1.97x], 7/16 | 1.99 | 0.34 | 16.5, 0.00 |"
    >>> read_cells(["| 18.6 | tpcb-like | 8 | 0 | 64 | none | 6,139 | 3.74 | 7.95 |  |  | 14.3, 0.00 |", row])
    {('18.6', 'tpcb-like', '8', '0', '64'): {'lockwatch 1 s': (0.97, 0.96)}}
    """
    cells: dict[tuple[str, ...], dict[str, Ratios]] = {}
    width = len(CELL)
    for line in lines:
        columns = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(columns) < width + 4 or columns[width] not in ARMS or columns[width] == NONE:
            continue
        tps, p999 = _RATIO.match(columns[width + 1]), _RATIO.match(columns[width + 3])
        if tps is None or p999 is None or int(tps["rounds"]) < MIN_ROUNDS:
            continue
        cell = (columns[0].split()[0], *columns[1:width])
        cells.setdefault(cell, {})[columns[width]] = (
            float(tps["median"]),
            float(p999["median"]),
        )
    return cells


def sign_test(fewer: int, trials: int) -> float:
    """Two-sided: the chance of ``fewer`` or fewer (or as many more) of
    ``trials`` coin tosses.

    >>> round(sign_test(4, 32), 6), sign_test(16, 32)
    (1.9e-05, 1.0)
    """
    tail: float = sum(comb(trials, k) for k in range(min(fewer, trials - fewer) + 1)) / 2**trials
    return min(1.0, 2 * tail)


def _lockwatch_worse(
    both: list[Mapping[str, Ratios]], other: str, figure: int, higher_is_worse: bool
) -> list[bool]:
    """Per cell where the two print differently: whether lockwatch's was worse."""
    pairs = [(arms[LOCKWATCH][figure], arms[other][figure]) for arms in both]
    return [(mine > theirs) == higher_is_worse for mine, theirs in pairs if mine != theirs]


def _against(cells: Cells, other: str) -> str:
    both = [arms for arms in cells.values() if LOCKWATCH in arms and other in arms]
    tps = _lockwatch_worse(both, other, 0, higher_is_worse=False)
    p999 = _lockwatch_worse(both, other, 1, higher_is_worse=True)
    return (
        f"- against {other}, in {len(both)} cells: lockwatch's TPS lower in {sum(tps)} of "
        f"{len(tps)} (sign test {sign_test(sum(tps), len(tps)):.2g}), its p99.9 higher in "
        f"{sum(p999)} of {len(p999)} (sign test {sign_test(sum(p999), len(p999)):.2g}); "
        "cells where the two print the same are left out"
    )


def report(cells: Cells) -> list[str]:
    rows = []
    for arm in ARMS:
        figures = [arms[arm] for arms in cells.values() if arm in arms]
        if not figures:
            continue
        tps, p999 = [f[0] for f in figures], [f[1] for f in figures]
        rows.append(
            [
                arm,
                str(len(figures)),
                spread(Spread.of(tps), ratio),
                str(sum(t < TPS_TARGET for t in tps)),
                spread(Spread.of(p999), ratio),
                str(sum(p > P999_TARGET for p in p999)),
            ]
        )
    header = [
        "arm",
        "cells",
        "TPS: median of the cells [min-max]",
        f"cells below {ratio(TPS_TARGET)}",
        "p99.9: median of the cells [min-max]",
        f"cells above {ratio(P999_TARGET)}",
    ]
    return [*table(header, rows), _against(cells, EXPORTER), _against(cells, FLOOR)]


def main(argv: list[str]) -> None:
    paths = [Path(a) for a in argv] or [DOC]
    cells: dict[tuple[str, ...], dict[str, Ratios]] = {}
    for path in paths:
        for cell, arms in read_cells(path.read_text().splitlines()).items():
            cells.setdefault(cell, {}).update(arms)
    print(f"{len(cells)} cells, from {', '.join(str(p) for p in paths)}")
    print("\n".join(report(cells)))


if __name__ == "__main__":
    main(sys.argv[1:])

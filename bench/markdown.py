"""Figures as markdown: numbers, ratios and tables, and their place between
markers in docs/benchmarks.md."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

# The page the benchmarks write their tables into.
DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


@dataclass(frozen=True, slots=True)
class Spread:
    """A per-round figure: its median and its range."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        return cls(statistics.median(values), min(values), max(values))


def ms(value: float) -> str:
    """
    >>> ms(0.4567), ms(45.67), ms(456.7)
    ('0.46', '45.7', '457')
    """
    if value < 10:
        return f"{value:.2f}"
    if value < 100:
        return f"{value:.1f}"
    return f"{value:.0f}"


def ratio(value: float) -> str:
    return f"{value:.2f}x"


def verdict(value: float, limit: float) -> str:
    """
    >>> verdict(1.1, 1.3), verdict(1.56, 1.3)
    ('yes', 'no, +20%')
    """
    if value <= limit:
        return "yes"
    return f"no, +{(value / limit - 1) * 100:.0f}%"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines.extend("| " + " | ".join(row) + " |" for row in rows)
    return [*lines, ""]


def spread(value: Spread, show: Callable[[float], str] = ms) -> str:
    """
    >>> spread(Spread(1.2, 1.1, 1.5), ratio)
    '1.20x [1.10x-1.50x]'
    """
    return f"{show(value.median)} [{show(value.low)}-{show(value.high)}]"


def write_into(path: Path, text: str, begin: str, end_marker: str) -> None:
    """Replace what lies between the markers in ``path``, keeping the prose around it."""
    block = f"{begin}\n{text}{end_marker}"
    try:
        document = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        document = ""
    start, end = document.find(begin), document.find(end_marker)
    if start < 0 or end < start:
        document = f"{document.rstrip()}\n\n{block}\n" if document.strip() else f"{block}\n"
    else:
        document = document[:start] + block + document[end + len(end_marker) :]
    path.write_text(document, encoding="utf-8")

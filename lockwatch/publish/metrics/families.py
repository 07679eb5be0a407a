"""lockwatch's own metric families, written straight into the exposition.

The board's series are lockwatch's: their names and label names are valid
constants, so nothing needs checking per sample, and a label value is made
printable and escaped once per scrape however many series carry it (a target's
name is on 131 of them). prometheus_client's encoder checks and escapes every
label name of every sample, some 5 µs a sample: 39,300 samples at 300 targets.
The lines are the ones it writes, byte for byte, in the text format and in
OpenMetrics, in every escaping of names (labels in name order, its float
spelling); ``tests/unit/publish/metrics/test_families.py`` holds them to it.
Each line is written as its series is added: a scrape keeps strings, not
39,300 objects for the cyclic collector to count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from math import copysign
from typing import cast

from prometheus_client.openmetrics.exposition import (
    UNDERSCORES,
    escape_label_name,
    escape_metric_name,
)
from prometheus_client.utils import floatToGoString

from lockwatch.text import printable

OPENMETRICS = "application/openmetrics-text"

# Sample values spelt as Go spells them, as prometheus_client does (its own function).
go_float = cast(Callable[[float], str], floatToGoString)


@dataclass(frozen=True, slots=True)
class Format:
    """The exposition format a scraper negotiated: the text format 0.0.4 (or
    1.0.0) or OpenMetrics, with the escaping of names it asked for."""

    openmetrics: bool = False
    escaping: str = UNDERSCORES

    @classmethod
    def of(cls, content_type: str) -> Format:
        """The format prometheus_client's ``choose_encoder`` answered with this content type."""
        escaping = UNDERSCORES
        for part in content_type.split(";"):
            key, _, value = part.strip().partition("=")
            if key == "escaping":
                escaping = value
        return cls(content_type.startswith(OPENMETRICS), escaping)

    @property
    def end(self) -> str:
        return "# EOF\n" if self.openmetrics else ""

    def header(self, name: str, documentation: str, kind: str) -> str:
        # The text format escapes backslashes and line breaks in HELP, OpenMetrics quotes too.
        text = documentation.replace("\\", r"\\").replace("\n", r"\n")
        if self.openmetrics:
            text = text.replace('"', r"\"")
        shown = escape_metric_name(name, self.escaping)
        return f"# HELP {shown} {text}\n# TYPE {shown} {kind}\n"

    def sample(self, name: str, labels: Sequence[str]) -> str:
        """A ``str.format`` template of a sample's line: the labels in name
        order, each value a positional field in ``labels``'s order, then the value."""
        ordered = sorted(range(len(labels)), key=labels.__getitem__)
        pairs = ",".join(
            f'{escape_label_name(labels[i], self.escaping)}="{{{i}}}"' for i in ordered
        )
        shown = escape_metric_name(name, self.escaping).replace("{", "{{").replace("}", "}}")
        # Doubled: the braces around the labels are the line's, not fields.
        line = f"{shown}{{{{{pairs}}}}}" if labels else shown
        return f"{line} {{{len(labels)}}}\n"


class _LabelValues(dict[str, str]):
    """Label values as the exposition spells them, each worked out once."""

    def __missing__(self, value: str) -> str:
        text = printable(value).replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
        self[value] = text
        return text


class _Numbers(dict[float, str]):
    """Sample values as prometheus_client spells them (Go's way), each worked out once."""

    def __missing__(self, value: float) -> str:
        text = self[value] = go_float(value)
        return text

    def spelt(self, value: float) -> str:
        # -0.0 equals 0, so it must not be looked up as it.
        return self[value] if value or copysign(1.0, value) > 0 else "-0.0"


class Family:
    """A gauge or counter of lockwatch's, its lines written as series are added."""

    __slots__ = ("_line", "_spelt", "_values", "header", "lines")

    def __init__(self, scrape: Exposition, header: str, line: str) -> None:
        self.header = header
        self.lines: list[str] = []
        self._line = line.format
        self._values = scrape.values.__getitem__
        self._spelt = scrape.numbers.spelt

    def add(self, values: Sequence[str], value: float) -> None:
        """One series: its label values in the family's label order, as they
        are (they are made printable and escaped here)."""
        self.lines.append(self._line(*map(self._values, values), self._spelt(value)))


class Histogram:
    """A histogram of lockwatch's: cumulative buckets, count and sum per series."""

    __slots__ = ("_bucket", "_count", "_spelt", "_sum", "_values", "header", "lines")

    def __init__(self, scrape: Exposition, name: str, documentation: str, labels: Sequence[str]):
        form = scrape.form
        self.header = form.header(name, documentation, "histogram")
        self.lines: list[str] = []
        self._bucket = form.sample(name + "_bucket", (*labels, "le")).format
        self._count = form.sample(name + "_count", labels).format
        self._sum = form.sample(name + "_sum", labels).format
        self._values = scrape.values.__getitem__
        self._spelt = scrape.numbers.spelt

    def add(
        self, values: Sequence[str], buckets: Sequence[tuple[str, float]], total: float
    ) -> None:
        """One series: its ``(le, cumulative count)`` buckets, ``+Inf`` last, and its sum."""
        escaped = [self._values(value) for value in values]
        spelt = self._spelt
        self.lines.extend(self._bucket(*escaped, self._values(le), spelt(n)) for le, n in buckets)
        self.lines.append(self._count(*escaped, spelt(buckets[-1][1])))
        self.lines.append(self._sum(*escaped, spelt(total)))


class Exposition:
    """One scrape's exposition of lockwatch's families, in the negotiated format."""

    def __init__(self, form: Format) -> None:
        self.form = form
        self.values = _LabelValues()
        self.numbers = _Numbers()

    def gauge(self, name: str, documentation: str, labels: Sequence[str]) -> Family:
        header = self.form.header(name, documentation, "gauge")
        return Family(self, header, self.form.sample(name, labels))

    def counter(self, name: str, documentation: str, labels: Sequence[str]) -> Family:
        """Its samples are ``<name>_total``; the text format names the family
        so too, OpenMetrics without the suffix."""
        family = name.removesuffix("_total")
        shown = family if self.form.openmetrics else family + "_total"
        header = self.form.header(shown, documentation, "counter")
        return Family(self, header, self.form.sample(family + "_total", labels))

    def histogram(self, name: str, documentation: str, labels: Sequence[str]) -> Histogram:
        return Histogram(self, name, documentation, labels)

    def text(self, families: Iterable[Family | Histogram]) -> str:
        """The families, each its header and lines, without OpenMetrics' ``# EOF``
        (the registry's collectors follow them)."""
        out: list[str] = []
        for family in families:
            out.append(family.header)
            out.extend(family.lines)
        return "".join(out)

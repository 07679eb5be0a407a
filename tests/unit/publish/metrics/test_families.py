"""lockwatch's own exposition writer against prometheus_client, its oracle: the
same families give the same bytes in every format and escaping a scraper can
negotiate, and any label value a client sends reads back as it was (made
printable) through prometheus_client's parsers."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from lockwatch.publish.metrics.families import Exposition, Family, Format, Histogram
from lockwatch.text import printable
from tests.fixtures.metrics import openmetrics_families

# What Prometheus 2 and 3 send, and the other formats and escapings
# prometheus_client's choose_encoder answers.
ACCEPTS = (
    "",
    "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;"
    "version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;"
    "escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
    "application/openmetrics-text",
    "application/openmetrics-text;version=1.0.0;escaping=dots",
    "text/plain;version=1.0.0;escaping=underscores",
    "text/plain;version=1.0.0;escaping=dots",
    "text/plain;version=1.0.0;escaping=values",
)
BUCKETS = ("0.1", "1", "10")

label_names = st.lists(
    st.sampled_from(("target", "database", "lock", "kind", "job_name", "le_", "a", "zz")),
    unique=True,
    max_size=4,
)
label_values = st.text(max_size=12) | st.sampled_from(('"', "\\", "\n", "\udcff", "", "{0}", "}x{"))
numbers = (
    st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from((0, -0.0, 1.0, 1234567.0, 1e-7))
)


@dataclass(frozen=True)
class Spec:
    """A family as a test draws it: what both writers are given."""

    kind: str  # gauge, counter, histogram
    name: str
    documentation: str
    labels: tuple[str, ...]
    rows: tuple[tuple[tuple[str, ...], tuple[float, ...]], ...]  # values; value or bucket counts


@st.composite
def specs(draw: st.DrawFn, index: int) -> Spec:
    kind = draw(st.sampled_from(("gauge", "counter", "histogram")))
    labels = tuple(draw(label_names))
    width = len(BUCKETS) + 2 if kind == "histogram" else 1  # buckets, +Inf, sum
    rows = draw(
        st.lists(
            st.tuples(
                st.tuples(*(label_values for _ in labels)),
                st.tuples(*(numbers for _ in range(width))),
            ),
            max_size=4,
        )
    )
    name = f"lockwatch_{kind}_{index}" + draw(st.sampled_from(("", "_total", "_seconds")))
    documentation = draw(st.text(max_size=20) | st.just('say "1" \\ \n twice'))
    return Spec(kind, name, printable(documentation), labels, tuple(rows))


def written(spec: Spec, scrape: Exposition) -> Family | Histogram:
    if spec.kind == "histogram":
        histogram = scrape.histogram(spec.name, spec.documentation, spec.labels)
        for values, counts in spec.rows:
            histogram.add(values, [*zip((*BUCKETS, "+Inf"), counts, strict=False)], counts[-1])
        return histogram
    make = scrape.counter if spec.kind == "counter" else scrape.gauge
    family = make(spec.name, spec.documentation, spec.labels)
    for values, (value,) in spec.rows:
        family.add(values, value)
    return family


def prometheus_family(spec: Spec) -> Metric:
    """The same family built as lockwatch built it with prometheus_client."""
    labels = list(spec.labels)
    family: GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily
    if spec.kind == "histogram":
        family = HistogramMetricFamily(spec.name, spec.documentation, labels=labels)
        for values, counts in spec.rows:
            buckets = [*zip((*BUCKETS, "+Inf"), counts, strict=False)]
            family.add_metric([printable(v) for v in values], buckets, counts[-1])
        return family
    kind = CounterMetricFamily if spec.kind == "counter" else GaugeMetricFamily
    family = kind(spec.name, spec.documentation, labels=labels)
    for values, (value,) in spec.rows:
        family.add_metric([printable(v) for v in values], value)
    return family


class _Families(Collector):
    def __init__(self, families: Sequence[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


@st.composite
def expositions(draw: st.DrawFn) -> list[Spec]:
    return [draw(specs(index)) for index in range(draw(st.integers(0, 4)))]


@settings(max_examples=300, deadline=None)
@given(expositions(), st.sampled_from(ACCEPTS))
def test_the_writer_writes_what_prometheus_client_writes_byte_for_byte(
    families: list[Spec], accept: str
) -> None:
    encoder, content_type = choose_encoder(accept)
    scrape = Exposition(Format.of(content_type))
    ours = scrape.text([written(spec, scrape) for spec in families]) + scrape.form.end
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families([prometheus_family(spec) for spec in families]))

    assert ours.encode("utf-8") == encoder(registry)


@settings(max_examples=300, deadline=None)
@given(st.lists(label_values, min_size=1, max_size=5), st.booleans())
def test_any_label_value_reads_back_through_prometheus_client_s_parsers(
    values: list[str], openmetrics: bool
) -> None:
    scrape = Exposition(Format(openmetrics=openmetrics))
    family = scrape.gauge("lockwatch_test", "A label value from a client.", ["target", "lock"])
    for n, value in enumerate(values):
        family.add((f"t{n}", value), n)
    text = scrape.text([family]) + scrape.form.end
    parse = openmetrics_families if openmetrics else text_string_to_metric_families

    (parsed,) = parse(text)

    assert [s.labels for s in parsed.samples] == [
        {"target": f"t{n}", "lock": printable(value)} for n, value in enumerate(values)
    ]


def test_the_negotiated_format_follows_the_content_type_prometheus_client_chose() -> None:
    cases = {
        "": Format(),
        "application/openmetrics-text; version=1.0.0": Format(openmetrics=True),
        "text/plain;version=1.0.0;escaping=allow-utf-8": Format(escaping="allow-utf-8"),
        "application/openmetrics-text;version=1.0.0;escaping=dots": Format(True, "dots"),
    }
    for accept, form in cases.items():
        assert Format.of(choose_encoder(accept)[1]) == form, accept


def test_a_counter_is_named_with_total_in_text_and_without_in_openmetrics() -> None:
    headers = {}
    for openmetrics in (False, True):
        scrape = Exposition(Format(openmetrics=openmetrics))
        polls = scrape.counter("lockwatch_polls_total", "Polls.", ["target"])
        polls.add(("main",), 3)
        headers[openmetrics] = scrape.text([polls])
    assert headers[False] == (
        "# HELP lockwatch_polls_total Polls.\n"
        "# TYPE lockwatch_polls_total counter\n"
        'lockwatch_polls_total{target="main"} 3.0\n'
    )
    assert headers[True].startswith("# HELP lockwatch_polls Polls.\n# TYPE lockwatch_polls counter")

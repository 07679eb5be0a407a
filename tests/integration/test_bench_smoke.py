"""``python -m bench`` at tiny sizes, so its machinery cannot rot unnoticed.

The figures are not judged here (speed is for the benchmark to print); the
test only checks that every table is there, with a row per measurement,
and that each number was measured.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench import scale, versions
from bench.daemon import PATHS
from bench.detection import INCIDENTS
from bench.documents import MANY_PATHS, render_costs
from bench.markdown import Spread, write_into
from bench.poll_cost import SPLIT
from bench.report import (
    BEGIN,
    END,
    VERSIONS_BEGIN,
    VERSIONS_END,
    render,
    render_versions,
)
from bench.run import Options, Results, run
from bench.server_parts import FLOOR, LOCKS, PARTS, POLL, SESSIONS
from bench.watchers import ARMS

pytestmark = [pytest.mark.pg, pytest.mark.slow]

TINY = Options(
    locks=(5,),
    polls=2,
    daemon_polls=2,
    interval=0.2,
    threshold=0.3,
    pgbench_rounds=1,
    pgbench_seconds=1.0,
    # The machinery, not the figures: small tables, few locks, a short settle.
    pgbench_locks=5,
    pgbench_scale=1,
    pgbench_settle=0.2,
    many_targets=2,
    # The targets' first polls are spread over their interval, which is waited for.
    many_interval=0.2,
)
SECTIONS = (
    "### Cost per poll against the floor",
    "### Against postgres_exporter",
    "### Footprint of `lockwatch run`",
    "### Detection time",
    "### Where a poll's CPU goes",
    "### What the documents cost",
    "### pgbench beside the monitors",
    "### Where a poll's server time goes",
)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Results:
    return run(TINY, tmp_path_factory.mktemp("bench"))


def table_rows(text: str, heading: str) -> list[list[str]]:
    """The body rows of the first table after ``heading``, as cells."""
    lines = text[text.index(heading) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_every_section_has_a_row_per_measurement(results: Results) -> None:
    text = render(results, "python -m bench --tiny")
    expected_detections = sum(len(incident.expected) for incident in INCIDENTS)
    counts = {heading: len(table_rows(text, heading)) for heading in SECTIONS}
    assert counts == {
        SECTIONS[0]: 1,
        SECTIONS[1]: 1,
        SECTIONS[2]: 1,
        SECTIONS[3]: expected_detections,
        SECTIONS[4]: 1,
        SECTIONS[5]: 2,  # the footprint's one target, and the many targets
        SECTIONS[6]: 1,  # lockwatch at 1 s against the targets
        SECTIONS[7]: 1,
    }
    # The scale rows are python -m bench.scale's (their own test below).
    assert "### Scale" not in text
    assert table_rows(text, SECTIONS[0])[0][0] == "5"


def test_lockwatch_the_floor_and_the_join_were_measured_on_client_and_server(
    results: Results,
) -> None:
    (cost,) = results.costs
    assert cost.locks == 5 and cost.polls == 2
    for spread in (cost.floor_ms, cost.join_ms, cost.poll_ms, cost.cpu_ms):
        assert 0 < spread.low <= spread.median <= spread.high
    for spread in (cost.floor_server_ms, cost.join_server_ms, cost.poll_server_ms):
        assert spread.low > 0
    assert cost.server_ratio.low > 0 and cost.client_join_ratio.low > 0
    # The parts of a poll add up to no more than its CPU (the GC is inside them).
    assert sum(cost.split_ms[part] for part in SPLIT) <= cost.cpu_ms.high + 1e-6
    assert cost.split_ms["sample"] > 0


def test_every_part_of_a_polls_server_time_was_found_in_pg_stat_statements(
    results: Results,
) -> None:
    (parts,) = results.server_parts
    assert parts.locks == 5 and parts.rounds == 2
    assert set(parts.ms) == {*PARTS, POLL}
    assert all(spread.low > 0 for spread in parts.ms.values())
    assert parts.ratio[FLOOR] == Spread(1.0, 1.0, 1.0)
    assert parts.waits_ratio.low > 0  # the lock statement over the advisory arrays alone
    # A poll is its two statements, round by round.
    assert parts.ms[POLL].high <= parts.ms[LOCKS].high + parts.ms[SESSIONS].high + 1e-9


def test_pgbench_ran_every_arm_and_read_its_latencies(results: Results) -> None:
    run_ = results.pgbench
    assert run_ is not None and run_.arms == ARMS and len(run_.rounds) == 1
    for arm in run_.rounds[0]:
        assert arm.tps > 0
        assert arm.p999 >= arm.p99 >= arm.p50 > 0
        assert arm.waits.samples > 0
    text = render(results, "python -m bench --tiny")
    rows = table_rows(text, "Every arm:")
    assert [row[5] for row in rows] == list(ARMS)


def test_the_documents_were_fetched_at_one_and_at_many_targets(results: Results) -> None:
    many = results.many
    assert many is not None and many.targets == 2
    assert [c.path for c in many.costs] == list(MANY_PATHS)
    (footprint,) = results.footprints
    assert [c.path for c in footprint.documents.costs] == list(PATHS)
    assert all(c.size > 0 and c.ms > 0 for c in (*many.costs, *footprint.documents.costs))


def test_postgres_exporter_was_scraped_and_only_counts_the_locks(results: Results) -> None:
    (exporter,) = results.exporter
    assert exporter.server_ms > 0 and exporter.scrape_ms > 0
    assert exporter.exclusive_locks == 5
    assert exporter.series > 0


def test_the_daemons_footprint_was_read_from_its_process_and_its_metrics(
    results: Results,
) -> None:
    (footprint,) = results.footprints
    assert footprint.polls >= 1
    assert footprint.rss_mib > 0
    assert footprint.held == 5
    assert footprint.metrics_bytes > 0 and footprint.series > 0


def test_every_incident_was_detected(results: Results) -> None:
    assert [d.seconds is not None for d in results.detections] == [True] * len(results.detections)


def test_the_scale_rows_time_every_poll_in_both_arms(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # A short directory: the server's socket path must fit in 107 bytes.
    where = tmp_path_factory.mktemp("scale")
    postgres, servers, scales = scale.run(where, [(2, 0.1), (3, 0.1)], seconds=0.3, say=print)
    assert servers == 1
    assert [(s.arm, s.targets) for s in scales] == [
        *(("pool", 2), ("thread", 2), ("spread", 2)),
        *(("thread", 3), ("spread", 3), ("pool", 3)),
    ], "the arms take turns going first"
    for row in scales:
        assert row.polls >= row.targets
        assert row.late_max_ms >= row.late_p99_ms >= row.late_p50_ms >= 0
        assert row.cpu_ms_per_poll > 0 and row.rss_mib > 0
        assert row.server_cpu_percent >= 0  # in clock ticks: 0 over a short row
        # Every target's series, more of them with ?detail=full.
        assert row.scrape.full_bytes_per_target > row.scrape.bytes_per_target > 0
        assert row.scrape.cpu_ms >= 0 and row.scrape.full_cpu_ms >= 0
    text = scale.render(scales, postgres, servers, "python -m bench.scale --tiny")
    assert len(table_rows(text, "### Scale")) == len(scales)


def test_the_documents_render_in_process_with_their_cost_and_size() -> None:
    one, fleet = render_costs(1, 30), render_costs(12, 3)
    assert [c.document for c in one] == ["/metrics", "/", "/api/v1/locks"]
    for cost in (*one, *fleet):
        assert cost.size > 0 and cost.after_poll_ms >= 0 and cost.again_ms >= 0
    page = next(c for c in fleet if c.document == "/")
    assert page.size < 12 * next(c for c in one if c.document == "/").size


def test_a_new_run_replaces_only_the_tables_in_the_doc(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# Benchmarks\n\nHow to read.\n\n{BEGIN}\nold tables\n{END}\n\n## Notes\n")
    write_into(doc, "new tables\n", BEGIN, END)
    assert doc.read_text() == (
        f"# Benchmarks\n\nHow to read.\n\n{BEGIN}\nnew tables\n{END}\n\n## Notes\n"
    )


def test_the_versions_table_has_a_measured_row_per_major_and_its_own_markers(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # A short directory: the servers' socket paths must fit in 107 bytes.
    where = tmp_path_factory.mktemp("versions")
    costs = versions.run(where, (12, 18), locks=5, polls=2)
    assert [(c.major, c.locks, c.polls) for c in costs] == [(12, 5, 2), (18, 5, 2)]
    for cost in costs:
        assert cost.version.startswith(f"{cost.major}.")
        assert 0 < cost.query_wall_ms <= cost.poll_wall_ms and cost.floor_wall_ms > 0
        assert cost.floor_server_ms > 0 and cost.poll_server_ms > 0
    text = render_versions(costs, "python -m bench --versions 12,18", datetime.now(UTC))
    rows = table_rows(text, "### Cost per poll on each PostgreSQL version")
    assert [row[0] for row in rows] == [costs[0].version, costs[1].version]

    doc = where / "benchmarks.md"
    doc.write_text(f"{BEGIN}\nmain tables\n{END}\n{VERSIONS_BEGIN}\nold\n{VERSIONS_END}\n")
    write_into(doc, text, VERSIONS_BEGIN, VERSIONS_END)
    assert (
        doc.read_text() == f"{BEGIN}\nmain tables\n{END}\n{VERSIONS_BEGIN}\n{text}{VERSIONS_END}\n"
    )

"""``python -m bench.impact`` at tiny sizes: the matrix, every kind of arm, the
wait sampler and the load readings, so that the machinery cannot rot
unnoticed. The figures are not judged here (they are the benchmark's to
print); the test checks that each was measured and shown."""

from __future__ import annotations

import pytest

from bench.impact import run
from bench.impact_cells import Options
from bench.impact_report import render
from bench.watchers import FLOOR, LOCKWATCH, LOCKWATCH_SQL, NONE
from tests.integration.test_bench_smoke import table_rows

pytestmark = [pytest.mark.pg, pytest.mark.slow]

ARMS = (NONE, LOCKWATCH, FLOOR, LOCKWATCH_SQL)
TINY = Options(
    postgres=(15,),
    workloads=("select-only",),
    clients=(2,),
    locks=(0, 5),
    max_locks=(64,),
    arms=ARMS,
    rounds=1,
    seconds=1.0,
    scale=1,
    settle=0.2,
)


def test_every_arm_of_every_cell_was_measured_and_shown(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # A short directory: the server's socket path must fit in 107 bytes.
    result = run(TINY, tmp_path_factory.mktemp("impact"))
    assert [(c.cell.postgres, c.cell.locks, c.version[:3]) for c in result.cells] == [
        (15, 0, "15."),
        (15, 5, "15."),
    ]
    for cell in result.cells:
        assert cell.arms == ARMS and len(cell.rounds) == 1
        for arm in cell.rounds[0]:
            assert arm.tps > 0
            assert arm.p999 >= arm.p99 >= arm.p50 > 0
            assert arm.waits.samples > 0
            assert arm.waits.waiting_ms_per_s >= arm.waits.during_polls_ms_per_s >= 0
            assert arm.load.load1 >= 0 and arm.load.others_percent >= 0
    text = render(result, "python -m bench.impact --tiny")
    assert [row[3] for row in table_rows(text, "lockwatch at 1 s against")] == ["0", "5"]
    shown = [(row[3], row[5]) for row in table_rows(text, "Every arm:")]
    assert shown == [(locks, arm) for locks in ("0", "5") for arm in ARMS]
    assert "load average" in text

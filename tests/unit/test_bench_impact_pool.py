"""``python -m bench.impact_pool``: the cells published on docs/benchmarks.md,
taken together, are what its hand-kept "All 32 cells" table says."""

from __future__ import annotations

from bench.impact_pool import read_cells, report, sign_test
from bench.markdown import DOC
from bench.watchers import ARMS, NONE


def test_every_cell_of_issue_29s_grid_is_read_back_with_every_arm() -> None:
    cells = read_cells(DOC.read_text().splitlines())
    grid = {(locks, max_locks) for _, _, _, locks, max_locks in cells}
    assert grid == {("0", "64"), ("0", "1,024"), ("10,000", "64"), ("10,000", "1,024")}
    assert len(cells) == 32
    assert all(set(arms) == set(ARMS) - {NONE} for arms in cells.values())


def test_the_pooled_table_on_the_page_is_the_one_the_tool_prints_from_it() -> None:
    text = DOC.read_text()
    printed = report(read_cells(text.splitlines()))
    table = printed[: printed.index("")]
    assert len(table) == 2 + len(ARMS) - 1
    assert "\n".join(table) in text


def test_a_cell_of_fewer_rounds_is_left_out() -> None:
    row = "| 18.6 | tpcb-like | 8 | 0 | 64 | the floor 1 s | 6,169, 1.03x [0.84x-1.23x], 7/{n} "
    row += "| 3.50, 1.00x [0.56x-1.43x], 8/{n} | 7.84, 1.02x [0.36x-1.41x], 9/{n} | 0.00 | 0.20 | 14.2, 0.00 |"
    assert read_cells([row.format(n=8)]) == {}
    assert read_cells([row.format(n=16)]) == {
        ("18.6", "tpcb-like", "8", "0", "64"): {"the floor 1 s": (1.03, 1.02)}
    }


def test_the_sign_test_is_symmetric_and_a_tie_is_certain() -> None:
    assert sign_test(3, 20) == sign_test(17, 20) < 0.01
    assert sign_test(10, 20) == 1.0
    assert sign_test(0, 0) == 1.0

"""The scheduler's view of a process, read from a /proc tree of the test's own."""

from __future__ import annotations

import doctest
from pathlib import Path

from lockwatch.sample import cpu
from lockwatch.sample.cpu import ProcessSched, ProcReader


def proc_tree(root: Path, pid: int, schedstat: str, stat: str) -> None:
    (root / str(pid)).mkdir(parents=True)
    (root / str(pid) / "schedstat").write_text(schedstat)
    (root / str(pid) / "stat").write_text(stat)


def test_the_doctests_hold() -> None:
    assert doctest.testmod(cpu).failed == 0


def test_a_runnable_process_tells_its_run_queue_time(tmp_path: Path) -> None:
    proc_tree(tmp_path, 42, "120000000 3500000000 77\n", "42 (worker) S) R 1 42 42 0\n")
    assert ProcReader(tmp_path).process(42) == ProcessSched(3.5, True)


def test_a_sleeping_process_is_not_runnable(tmp_path: Path) -> None:
    proc_tree(tmp_path, 7, "5 6 1\n", "7 (python3) S 1 7 7 0\n")
    assert ProcReader(tmp_path).process(7) == ProcessSched(6e-9, False)


def test_a_process_gone_or_without_schedstat_tells_nothing(tmp_path: Path) -> None:
    reader = ProcReader(tmp_path)
    assert reader.process(99) is None
    proc_tree(tmp_path, 8, "", "8 (x) R 1\n")
    assert reader.process(8) is None


def test_the_hosts_cpu_pressure_is_psis_some_total(tmp_path: Path) -> None:
    reader = ProcReader(tmp_path)
    assert reader.host_pressure() is None
    (tmp_path / "pressure").mkdir()
    (tmp_path / "pressure" / "cpu").write_text(
        "some avg10=98.48 avg60=97.72 avg300=96.60 total=1835196036\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    )
    assert reader.host_pressure() == 1835.196036

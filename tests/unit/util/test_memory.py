"""Freed memory given back after large polls: only after a poll of many locks,
at most once per interval process-wide, and never where the C library has
no malloc_trim. The RSS it saves is measured by the battery
(tests/battery/test_big_flood.py), on a real daemon."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

import pytest

from lockwatch.util.memory import TRIM_EVERY, TRIM_FROM_LOCKS, MemoryTrimmer, _malloc_trim


class Trims:
    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, pad: int) -> int:
        self.calls.append(pad)
        return 1


def test_only_a_large_poll_trims_and_at_most_once_an_interval() -> None:
    clock = [100.0]
    trims = Trims()
    trimmer = MemoryTrimmer(trims, monotonic=lambda: clock[0])
    assert not trimmer.after_poll(TRIM_FROM_LOCKS - 1)  # a small poll leaves little
    assert trimmer.after_poll(TRIM_FROM_LOCKS)
    clock[0] += TRIM_EVERY / 2
    assert not trimmer.after_poll(200_000)  # another target's large poll, too soon
    clock[0] += TRIM_EVERY / 2
    assert trimmer.after_poll(200_000)
    assert trims.calls == [0, 0] and trimmer.trims == 2


def test_without_malloc_trim_nothing_is_done() -> None:
    trimmer = MemoryTrimmer(None)
    assert not trimmer.after_poll(10 * TRIM_FROM_LOCKS)
    assert trimmer.trims == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_glibc_s_malloc_trim_is_found_and_callable() -> None:
    libc = ctypes.util.find_library("c") or ""
    trim = _malloc_trim()
    if "musl" in libc:
        assert trim is None
        return
    assert trim is not None
    assert trim(0) in (0, 1)  # 1: memory was given back, 0: there was none to give

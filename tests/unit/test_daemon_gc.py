"""The daemon settles the cyclic garbage collector before its first poll."""

from __future__ import annotations

import gc

from lockwatch.daemon import settle_garbage_collector
from lockwatch.util.memory import GC_THRESHOLDS


def test_startup_objects_are_frozen_and_collections_come_less_often() -> None:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)  # Python's own, whatever ran in this process before
    try:
        settle_garbage_collector()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == GC_THRESHOLDS
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)

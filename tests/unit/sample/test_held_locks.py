"""The presets' locks held on purpose, as the lock monitor reads them: only the
presets that have such a query are asked, rows become named keys, and a read
that fails keeps the last answer (logged once) rather than paging every
running job's lock."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytest

from lockwatch.model.catalogue import KnownLock, Purpose
from lockwatch.model.locks import LockKey
from lockwatch.sample.base import SampleError
from lockwatch.sample.held_locks import HeldLocksReader, held_locks_queries


class Answers:
    """The target's session as the reader uses it: each query's rows, or a failure."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.failing = False
        self.asked: list[str] = []

    def query(self, query: Any, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        self.asked.append(str(query))
        if self.failing:
            raise SampleError("permission denied for table good_job_processes")
        return self.rows


def test_only_the_presets_with_locks_held_on_purpose_are_asked() -> None:
    assert sorted(held_locks_queries(["good_job", "que", "pg-boss", None, "good_job"])) == [
        "good_job",
        "que",
    ]
    assert held_locks_queries(["river", "rq", None]) == {}


def test_rows_are_named_keys_and_a_failed_read_keeps_the_last_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    db = Answers()
    db.rows = [{"database": "app", "key": -5, "name": "good_job job 7", "purpose": "job"}]
    reader = HeldLocksReader(["good_job"])
    expected = {("app", LockKey.bigint(-5)): KnownLock("good_job", "good_job job 7", Purpose.JOB)}
    assert reader.read(db) == expected
    db.failing = True
    with caplog.at_level(logging.WARNING):
        assert reader.read(db) == expected
        assert reader.read(db) == expected
    assert len([r for r in caplog.records if "good_job" in r.getMessage()]) == 1
    db.failing = False
    db.rows = []
    assert reader.read(db) == {}
    assert len(db.asked) == 4

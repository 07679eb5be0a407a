"""The fleet on file_sd files: this shard's part, the last good list kept
through a failed read and a changed source, names the config already has."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from lockwatch.fleet import LONGEST_NAP, SUMMARY_EVERY, Fleet, UnreachableSummary
from lockwatch.model.locks import LockSnapshot
from lockwatch.model.views import TargetStatus
from lockwatch.settings.sharding import ALL, Shard
from lockwatch.settings.sources import AuthModule, TargetSource
from lockwatch.settings.targets import Settings, Target
from lockwatch.state.target_view import TargetView


def settings_for(path: Path, *targets: Target) -> Settings:
    return Settings(
        targets=targets,
        target_sources=(TargetSource(name="fleet", auth_module="monitor", file=path),),
        auth_modules=(AuthModule(name="monitor", user="lockwatch"),),
    )


def write(path: Path, addresses: list[str]) -> None:
    path.write_text(json.dumps([{"targets": addresses}]))


def names(settings: Settings) -> list[str]:
    return [target.name for target in settings.targets]


def test_the_shards_of_a_fleet_split_its_targets_between_them(tmp_path: Path) -> None:
    path = tmp_path / "sd.json"
    write(path, [f"db-{i}:5432" for i in range(40)])
    settings = settings_for(path)
    parts = []
    for index in range(4):
        fleet = Fleet(settings, Shard(index, 4))
        assert fleet.refresh() is True
        parts.append(set(names(fleet.watched(settings))))
        assert fleet.status().watched == len(parts[-1])

    assert sum(map(len, parts)) == 40
    assert set().union(*parts) == {f"db-{i}_5432" for i in range(40)}


def test_a_failed_read_keeps_the_last_good_list_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "sd.json"
    write(path, ["a:5432"])
    settings = settings_for(path)
    clock = [0.0]
    fleet = Fleet(settings, ALL, monotonic=lambda: clock[0])
    fleet.refresh()
    path.write_text("[{")  # half written
    clock[0] += 5.0  # the file's next look is due

    assert fleet.refresh() is False
    assert names(fleet.watched(settings)) == ["a_5432"]
    (health,) = fleet.status().sources
    assert (health.up, health.errors_total, health.targets) == (False, 1, 1)
    assert health.error is not None and "is not valid" in health.error


def test_a_changed_source_keeps_its_list_until_it_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "sd.json"
    write(path, ["a:5432"])
    settings = settings_for(path)
    fleet = Fleet(settings, ALL)
    fleet.refresh()
    changed = replace(
        settings, target_sources=(replace(settings.target_sources[0], refresh_interval=30.0),)
    )
    fleet.configure(changed)

    assert names(fleet.watched(changed)) == ["a_5432"]
    write(path, ["b:5432"])
    assert fleet.refresh() is True
    assert names(fleet.watched(changed)) == ["b_5432"]


def test_a_discovered_name_the_config_has_keeps_the_config_s_target(tmp_path: Path) -> None:
    path = tmp_path / "sd.json"
    write(path, ["a:5432", "b:5432"])
    own = Target(name="a_5432", dsn="host=elsewhere")
    settings = settings_for(path, own)
    fleet = Fleet(settings, ALL)
    fleet.refresh()

    watched = fleet.watched(settings)
    assert watched.targets[0] is own
    assert names(watched) == ["a_5432", "b_5432"]
    (health,) = fleet.status().sources
    assert (health.targets, health.rejected) == (1, 1)


def test_the_reading_thread_naps_between_looks_even_with_no_source(tmp_path: Path) -> None:
    # Without sources, nothing is ever due: the thread must still sleep, not
    # spin and take the interpreter from the poll threads.
    idle = Fleet(Settings(targets=(Target("main", "host=127.0.0.1 dbname=app"),)), ALL)
    assert idle.nap() == LONGEST_NAP
    path = tmp_path / "sd.json"
    write(path, ["db-1.internal:5432"])
    clock = [100.0]
    fleet = Fleet(settings_for(path), ALL, monotonic=lambda: clock[0])
    fleet.refresh()
    assert 0.0 < fleet.nap() <= LONGEST_NAP


def test_unreachable_targets_are_summed_up_once_per_change_at_most_a_minute_apart(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = datetime(2026, 12, 1, tzinfo=UTC)

    def view(name: str, up: bool) -> TargetView:
        snapshot = LockSnapshot(name, now, 180000, ()) if up else None
        status = TargetStatus(name, now, snapshot, None if up else "connection refused")
        return TargetView(Target(name, "postgresql://m@127.0.0.1/db"), status=status)

    fleet = tuple(view(f"db{n}", up=n == 0) for n in range(8))
    summary = UnreachableSummary()
    caplog.set_level(logging.INFO, logger="lockwatch.fleet")
    summary.observe(fleet, 0.0)
    summary.observe(fleet, SUMMARY_EVERY + 1)  # nothing changed: nothing said
    summary.observe((fleet[0],), SUMMARY_EVERY + 2)  # changed, but within a minute
    summary.observe((fleet[0],), 2 * SUMMARY_EVERY + 2)
    said = [record.getMessage() for record in caplog.records]
    assert said[0].startswith("7 of 8 target(s) cannot be sampled")
    assert said[0].endswith("db1, db2, db3, db4, db5 and 2 more")
    assert said[1:] == ["every target answers again"]

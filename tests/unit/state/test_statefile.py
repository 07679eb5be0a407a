from __future__ import annotations

import logging
import os
import shutil
import threading
from pathlib import Path

import pytest

from lockwatch.state.statefile import (
    FORMAT_VERSION,
    StateDirInUseError,
    StateDirLock,
    StateStore,
    remove_leftovers,
)

DOCUMENT = {"holds": {"saved_at": "2025-03-14T21:40:00+00:00", "locks": []}, "findings": []}


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


def test_a_saved_document_loads_back_with_its_version(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    assert store.save("main", DOCUMENT) is True
    assert store.load("main") == {"version": FORMAT_VERSION, **DOCUMENT}
    assert (tmp_path / "state" / "target-main.json").is_file()
    assert store.write_errors_total == 0


def test_each_target_has_its_own_file(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    store.save("main", {"findings": [1]})
    store.save("reports", {"findings": [2]})
    assert store.load("main") == {"version": FORMAT_VERSION, "findings": [1]}
    assert store.load("reports") == {"version": FORMAT_VERSION, "findings": [2]}


def test_a_save_replaces_the_previous_one_and_leaves_no_temp_files(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    store.save("main", {"findings": [1]})
    store.save("main", {"findings": [2]})
    assert store.load("main") == {"version": FORMAT_VERSION, "findings": [2]}
    assert leftovers(tmp_path) == []


def test_nothing_saved_loads_as_none(tmp_path: Path) -> None:
    assert StateStore(tmp_path).load("main") is None


def test_a_store_without_a_directory_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = StateStore(None)
    assert store.save("main", DOCUMENT) is True
    assert store.load("main") is None
    assert list(tmp_path.iterdir()) == []
    assert store.write_errors_total == 0


def test_an_unwritable_directory_is_counted_logged_once_and_never_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # the tests run as root, which chmod does not stop: a file in the way does
    blocker = tmp_path / "state"
    blocker.write_text("not a directory")
    store = StateStore(blocker / "lockwatch")
    with caplog.at_level(logging.WARNING, logger="lockwatch.state.statefile"):
        assert [store.save("main", DOCUMENT) for _ in range(3)] == [False, False, False]
        assert store.write_errors_total == 3
        (logged,) = errors(caplog)
        assert str(blocker / "lockwatch" / "target-main.json") in logged
        assert "monitoring goes on" in logged

        blocker.unlink()
        assert store.save("main", DOCUMENT) is True
    assert store.load("main") == {"version": FORMAT_VERSION, **DOCUMENT}
    assert any("again" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert store.write_errors_total == 3


def test_a_failing_rename_is_logged_once_though_each_temp_file_has_its_own_name(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # a directory where the file should be makes os.replace fail, and the
    # error names the random temp file
    (tmp_path / "target-main.json").mkdir()
    store = StateStore(tmp_path)
    with caplog.at_level(logging.ERROR, logger="lockwatch.state.statefile"):
        assert not store.save("main", DOCUMENT)
        assert not store.save("main", DOCUMENT)
    (logged,) = errors(caplog)
    assert "Is a directory" in logged
    assert ".target-main.json." not in logged
    assert store.write_errors_total == 2
    assert leftovers(tmp_path) == [], "the temp files are removed"


def test_failures_of_two_targets_sharing_the_store_are_each_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("not a directory")
    store = StateStore(blocker)
    with caplog.at_level(logging.WARNING, logger="lockwatch.state.statefile"):
        for _ in range(3):
            store.save("main", DOCUMENT)
            store.save("reports", DOCUMENT)
    assert len(errors(caplog)) == 2
    assert store.write_errors_total == 6


def test_one_target_recovering_does_not_hide_another_ones_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "target-reports.json").mkdir()
    store = StateStore(tmp_path)
    with caplog.at_level(logging.WARNING, logger="lockwatch.state.statefile"):
        for _ in range(3):
            assert store.save("main", DOCUMENT)
            assert not store.save("reports", DOCUMENT)
    assert len(errors(caplog)) == 1
    assert not any("again" in r.getMessage() for r in caplog.records), "main never failed"


def test_a_document_that_is_not_json_is_not_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = StateStore(tmp_path)
    store.save("main", {"findings": [1]})
    with caplog.at_level(logging.ERROR, logger="lockwatch.state.statefile"):
        assert store.save("main", {"findings": [object()]}) is False
    assert len(errors(caplog)) == 1
    assert store.load("main") == {"version": FORMAT_VERSION, "findings": [1]}
    assert leftovers(tmp_path) == []


def test_concurrent_saves_of_many_targets_count_every_failure(tmp_path: Path) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("not a directory")
    store = StateStore(blocker)

    def save_many(target: str) -> None:
        for _ in range(200):
            store.save(target, DOCUMENT)

    threads = [threading.Thread(target=save_many, args=(f"t{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert store.write_errors_total == 800


@pytest.mark.parametrize(
    "content",
    ["{not json", '{"version": 99, "findings": []}', '["version", 1]', '{"findings": []}', ""],
)
def test_a_corrupt_file_or_unknown_version_loads_as_none_with_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: str
) -> None:
    (tmp_path / "target-main.json").write_text(content)
    with caplog.at_level(logging.ERROR, logger="lockwatch.state.statefile"):
        assert StateStore(tmp_path).load("main") is None
    (logged,) = errors(caplog)
    assert "target-main.json" in logged


def test_an_unreadable_state_file_loads_as_none_with_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "target-main.json").mkdir()
    with caplog.at_level(logging.ERROR, logger="lockwatch.state.statefile"):
        assert StateStore(tmp_path).load("main") is None
    assert len(errors(caplog)) == 1


def test_a_missing_state_directory_is_created_on_first_save(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "var" / "lib" / "lockwatch")
    assert store.load("main") is None
    assert store.save("main", DOCUMENT)
    shutil.rmtree(tmp_path / "var")
    assert store.save("main", DOCUMENT), "and again if it is removed while running"


def test_a_forgotten_target_loads_nothing_and_forgetting_twice_is_harmless(
    tmp_path: Path,
) -> None:
    store = StateStore(tmp_path / "state")
    store.save("main", DOCUMENT)
    store.save("second", DOCUMENT)
    store.forget("second")
    store.forget("second")
    assert store.load("second") is None
    assert store.load("main") is not None


def test_a_state_dir_is_locked_by_one_lockwatch_at_a_time(tmp_path: Path) -> None:
    first = StateDirLock(tmp_path / "state")
    with pytest.raises(StateDirInUseError, match=f"in use by lockwatch pid {os.getpid()}"):
        StateDirLock(tmp_path / "state")
    first.release()
    StateDirLock(tmp_path / "state").release()


def test_a_state_dir_that_cannot_be_locked_costs_a_warning_not_the_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    with caplog.at_level(logging.WARNING):
        StateDirLock(blocked / "state").release()
    assert "cannot lock the state dir" in caplog.text


@pytest.mark.parametrize(
    "content",
    [b"[" * 100_000, b"\xff\xfe{", b'{"version": 1', b"[1, 2]", b'{"version": 99}', b""],
)
def test_a_state_file_that_cannot_be_read_is_moved_aside_with_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes
) -> None:
    store = StateStore(tmp_path)
    (tmp_path / "target-main.json").write_bytes(content)
    with caplog.at_level(logging.ERROR):
        assert store.load("main") is None
    assert len(errors(caplog)) == 1 and "moved aside" in errors(caplog)[0]
    (aside,) = tmp_path.glob("target-main.json.unreadable-*")
    assert aside.read_bytes() == content
    assert store.save("main", DOCUMENT) and store.load("main") is not None


def test_temporary_files_of_an_interrupted_save_are_removed_and_nothing_else(
    tmp_path: Path,
) -> None:
    for name in (".target-main.json.abc", ".notify-ops.json.x1", "target-main.json", ".keep"):
        (tmp_path / name).write_text("{}")
    remove_leftovers(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".keep", "target-main.json"]


def test_a_refresh_leaves_the_durable_file_alone_and_is_read_back_first(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    store.save("main", {"findings": [1]})
    durable = (tmp_path / "target-main.json").stat()

    assert store.save("main", {"findings": [2]}, durable=False) is True

    assert (tmp_path / "target-main.json").stat().st_mtime_ns == durable.st_mtime_ns
    assert store.load("main") == {"version": FORMAT_VERSION, "findings": [2]}
    store.save("main", {"findings": [3]})
    assert not (tmp_path / "target-main.json.recent").exists()
    assert store.load("main") == {"version": FORMAT_VERSION, "findings": [3]}


def test_a_refresh_lost_to_a_power_cut_falls_back_to_the_durable_save(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = StateStore(tmp_path)
    store.save("main", {"findings": [1]})
    (tmp_path / "target-main.json.recent").write_bytes(b"")  # what a power cut leaves

    assert store.load("main") == {"version": FORMAT_VERSION, "findings": [1]}
    assert not (tmp_path / "target-main.json.recent").exists()
    assert any("refresh" in r.getMessage() for r in caplog.records)


def test_forgetting_a_target_removes_its_refresh_too(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    store.save("main", {"findings": [1]})
    store.save("main", {"findings": [2]}, durable=False)

    store.forget("main")

    assert store.load("main") is None
    assert list(tmp_path.iterdir()) == []


def test_after_a_failed_save_the_next_refresh_is_durable(tmp_path: Path) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("not a directory")  # every save fails
    store = StateStore(blocker)
    assert store.save("main", {"findings": [1]}) is False
    blocker.unlink()

    assert store.save("main", {"findings": [2]}, durable=False) is True

    assert (blocker / "target-main.json").is_file()
    assert not (blocker / "target-main.json.recent").exists()

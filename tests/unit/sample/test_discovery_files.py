"""Reading file_sd files: JSON or YAML, parsed again only when they change, a
half-written file a failure of that read only."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lockwatch.model.discovery import TargetGroup
from lockwatch.sample.base import SampleError
from lockwatch.sample.discovery import FileSd, parse_groups
from lockwatch.settings.sources import TargetSource


def source(path: Path) -> TargetSource:
    return TargetSource(name="fleet", auth_module="monitor", file=path)


def test_the_prometheus_format_becomes_target_groups_with_sorted_labels() -> None:
    document = [{"targets": ["a:1", "b:2"], "labels": {"z": "1", "a": "2"}}, {"targets": []}]

    assert parse_groups(document, "t") == (
        TargetGroup(("a:1", "b:2"), (("a", "2"), ("z", "1"))),
        TargetGroup(()),
    )
    assert parse_groups([], "t") == ()


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"targets": ["a:1"]}, "expected a list of target groups"),
        (["a:1"], "group 0: expected a mapping"),
        ([{"targets": "a:1"}], "targets must be a list of strings"),
        ([{"targets": ["a:1"], "labels": {"n": 1}}], "labels must map strings to strings"),
    ],
)
def test_a_wrong_document_says_what_is_wrong(document: object, message: str) -> None:
    with pytest.raises(SampleError, match=message):
        parse_groups(document, "t")


def test_a_json_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "sd.json"
    path.write_text(json.dumps([{"targets": ["a:1"]}]))
    reader = FileSd(source(path))
    first = reader.read()

    path.write_text(json.dumps([{"targets": ["a:1", "b:2"]}]))
    os.utime(path, ns=(1, 1))  # a change within one mtime tick still differs in size

    assert first == (TargetGroup(("a:1",)),)
    assert reader.read() == (TargetGroup(("a:1", "b:2")),)


def test_a_yaml_file_is_read_as_yaml(tmp_path: Path) -> None:
    path = tmp_path / "sd.yml"
    path.write_text("- targets: [a:1]\n  labels: {env: prod}\n")

    assert FileSd(source(path)).read() == (TargetGroup(("a:1",), (("env", "prod"),)),)


def test_a_half_written_or_missing_file_fails_that_read_and_the_next_good_one_recovers(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sd.json"
    reader = FileSd(source(path))
    with pytest.raises(SampleError, match="cannot read"):
        reader.read()
    path.write_text('[{"targets": ["a:1"')
    with pytest.raises(SampleError, match="is not valid"):
        reader.read()
    path.write_text('[{"targets": ["a:1"]}]')

    assert reader.read() == (TargetGroup(("a:1",)),)

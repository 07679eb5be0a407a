"""Each key is declared once, on its settings dataclass: the keys a section of
the file takes are that dataclass's fields, but for the few the YAML spells
otherwise; an unknown key anywhere is one problem with a did-you-mean."""

from __future__ import annotations

import textwrap
from dataclasses import fields
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockwatch.config.load import ConfigError, ConfigProblem, load_settings
from lockwatch.settings.jobs import JobSpec, PingSettings
from lockwatch.settings.locks import AllowedHolders, LockSettings, NamedLock
from lockwatch.settings.notify import NotifySettings, Route, TelegramChannel
from lockwatch.settings.pooler import PoolerSpec
from lockwatch.settings.queues import (
    ProcessMatch,
    Queue,
    QueueThresholds,
    RedisQueueSource,
    SqlQueueSource,
    WorkerGroup,
)
from lockwatch.settings.schedule import Schedule
from lockwatch.settings.targets import Settings, Target

ENV = {"TOKEN": "a-long-random-ping-token", "BOT": "123456:token"}

# A file with one of every section; each entry of PLACES is a mapping in it:
# its dotted path, the line of its first key, and the indentation of its keys.
DOCUMENT = textwrap.dedent(
    """\
    state_dir: .
    defaults:
      interval: 10s
      locks:
        top_n: 5
    targets:
      - name: main
        dsn: host=db
        locks:
          max_hold: 5m
          named:
            - name: a
              key: 1
              allowed_holders:
                applications: [x]
        queues:
          - name: q
            sql: SELECT 1 AS depth
        workers:
          - name: w
            queues: [q]
            processes:
              cmdline: x
        pgbouncer:
          dsn: host=db
    notify:
      read_timeout: 5s
      channels:
        - name: ops
          type: telegram
          bot_token: ${BOT}
          chat_id: 1
      routes:
        - channels: [ops]
    pings:
      token: ${TOKEN}
    jobs:
      - name: j
        query: SELECT 1
        schedule:
          cron: "* * * * *"
    """
)
PLACES = [
    ("", 1, 0),
    ("defaults", 3, 2),
    ("defaults.locks", 5, 4),
    ("targets[0]", 7, 4),
    ("targets[0].locks", 10, 6),
    ("targets[0].locks.named[0]", 12, 10),
    ("targets[0].locks.named[0].allowed_holders", 15, 12),
    ("targets[0].queues[0]", 17, 8),
    ("targets[0].workers[0]", 20, 8),
    ("targets[0].workers[0].processes", 23, 10),
    ("targets[0].pgbouncer", 25, 6),
    ("notify", 27, 2),
    ("notify.channels[0]", 29, 6),
    ("notify.routes[0]", 34, 6),
    ("pings", 36, 2),
    ("jobs[0]", 38, 4),
    ("jobs[0].schedule", 41, 6),
]


def with_lines(line: int, indent: int, texts: list[str]) -> str:
    """DOCUMENT with ``texts`` as new lines after ``line``, among that mapping's keys."""
    lines = DOCUMENT.splitlines(keepends=True)
    return "".join([*lines[:line], *(" " * indent + text + "\n" for text in texts), *lines[line:]])


def with_line(line: int, indent: int, text: str) -> str:
    return with_lines(line, indent, [text])


def problems_of(tmp_path: Path, text: str) -> tuple[ConfigProblem, ...]:
    path = tmp_path / "lockwatch.yml"
    path.write_text(text)
    try:
        load_settings(path, ENV)
    except ConfigError as exc:
        return exc.problems
    return ()


def test_the_document_with_every_section_is_valid(tmp_path: Path) -> None:
    assert problems_of(tmp_path, DOCUMENT) == ()


def accepted(tmp_path: Path, place: tuple[str, int, int], candidates: set[str]) -> set[str]:
    """The candidates the mapping at ``place`` takes as keys: all of them in one
    file (the loader reports every unknown key of a file, whatever else is wrong
    in it; one key at a time is the property test below)."""
    path, line, indent = place
    problems = problems_of(
        tmp_path, with_lines(line, indent, [f"{key}: [[1]]" for key in sorted(candidates)])
    )
    refused = {p.path for p in problems if p.message.startswith(("unknown key", "not a key of"))}
    return {key for key in candidates if (f"{path}.{key}" if path else key) not in refused}


def names(cls: type, *, without: tuple[str, ...] = ()) -> set[str]:
    return {f.name for f in fields(cls)} - set(without)


SECTIONS = {
    "": names(Settings, without=("source", "web", "target_defaults")) | {"web_config", "defaults"},
    "defaults": {"interval", "connect_timeout", "statement_timeout", "locks", "queues", "actions"},
    "defaults.locks": names(LockSettings, without=("named",)),
    "targets[0]": names(Target, without=("discovered", "labels")) | {"dsn_file"},
    "targets[0].locks": names(LockSettings),
    "targets[0].locks.named[0]": names(NamedLock, without=("allowed",)) | {"allowed_holders"},
    "targets[0].locks.named[0].allowed_holders": names(
        AllowedHolders, without=("networks", "local")
    )
    | {"addresses"},
    "targets[0].queues[0]": names(Queue, without=("source", "thresholds"))
    | names(QueueThresholds)
    | names(SqlQueueSource, without=("query", "params", "schema"))
    | names(RedisQueueSource, without=("url", "keys", "layout"))
    | {"sql", "redis", "key", "queue"},
    "targets[0].workers[0]": names(WorkerGroup, without=("cpu",))
    | {"processes", "cgroup", "prometheus"},
    "targets[0].workers[0].processes": names(ProcessMatch),
    "targets[0].pgbouncer": names(PoolerSpec) | {"dsn_file"},
    "notify": names(NotifySettings, without=("for_duration",)) | {"for"},
    "notify.channels[0]": names(TelegramChannel) | {"type", "bot_token_file"},
    "notify.routes[0]": names(Route, without=("for_duration",)) | {"for"},
    "pings": names(PingSettings, without=("store_dsn",)) | {"dsn", "dsn_file", "store"},
    "jobs[0]": names(JobSpec),
    "jobs[0].schedule": names(Schedule),
}
EVERY_KEY = set().union(*SECTIONS.values()) | {"url", "url_file", "unit", "path", "root", "cpu"}


@pytest.mark.parametrize("place", PLACES, ids=[place[0] or "top" for place in PLACES])
def test_a_section_takes_its_dataclass_s_fields_as_keys(
    tmp_path: Path, place: tuple[str, int, int]
) -> None:
    assert accepted(tmp_path, place, EVERY_KEY | {"colour"}) == SECTIONS[place[0]]


@pytest.mark.parametrize("place", PLACES, ids=[place[0] or "top" for place in PLACES])
def test_a_key_missing_its_last_letter_gets_a_did_you_mean_at_every_level(
    tmp_path: Path, place: tuple[str, int, int]
) -> None:
    path, line, indent = place
    key = max(SECTIONS[path], key=len)
    problems = problems_of(tmp_path, with_line(line, indent, f"{key[:-1]}: 1"))

    assert [(p.path, p.line, p.message) for p in problems] == [
        (
            f"{path}.{key[:-1]}" if path else key[:-1],
            line + 1,
            f"unknown key (did you mean {key!r}?)",
        )
    ]


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    place=st.sampled_from(PLACES),
    key=st.from_regex(r"[a-z][a-z_]{1,14}", fullmatch=True).filter(
        lambda key: key not in EVERY_KEY and not key.endswith("_file")
    ),
    value=st.sampled_from(["1", "x", "[a, b]", "{a: 1}", "", "${TOKEN}"]),
)
def test_any_unknown_key_anywhere_is_one_problem_at_its_path_and_line(
    tmp_path: Path, place: tuple[str, int, int], key: str, value: str
) -> None:
    path, line, indent = place
    (problem,) = problems_of(tmp_path, with_line(line, indent, f"{key}: {value}"))

    assert problem.path == (f"{path}.{key}" if path else key)
    assert problem.line == line + 1
    assert problem.message.startswith("unknown key (")


@pytest.mark.parametrize(
    "cls",
    [Settings, Target, LockSettings, NamedLock, AllowedHolders, Queue, WorkerGroup, PingSettings],
)
def test_the_settings_stay_frozen_slotted_dataclasses(cls: type) -> None:
    assert cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert "__slots__" in cls.__dict__


@pytest.mark.parametrize(
    ("line", "indent", "text", "path"),
    [
        (38, 4, "target: ${SECRET}", "jobs[0].target"),
        (34, 6, "targets: ['${SECRET}']", "notify.routes[0].targets[0]"),
        (7, 4, "interval: ${SECRET}", "targets[0].interval"),
    ],
)
def test_a_value_from_the_environment_is_never_shown(
    tmp_path: Path, line: int, indent: int, text: str, path: str
) -> None:
    file = tmp_path / "lockwatch.yml"
    file.write_text(with_line(line, indent, text))

    with pytest.raises(ConfigError) as caught:
        load_settings(file, {**ENV, "SECRET": "hunter2-in-env"})

    assert "hunter2-in-env" not in str(caught.value)
    assert path in {p.path for p in caught.value.problems} | {
        p.path.rsplit(".", 1)[0] for p in caught.value.problems
    }

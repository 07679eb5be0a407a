"""``queues:`` and ``workers:`` in the config: what a good file gives, and every
problem reported at once with its line and dotted path, secrets withheld."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from lockwatch.config.load import ConfigError, ConfigProblem, load_settings
from lockwatch.sample.presets.registry import preset_source
from lockwatch.settings.queues import (
    CgroupCpu,
    ProcessMatch,
    PrometheusCpu,
    Queue,
    QueueThresholds,
    RedisQueueSource,
    RedisType,
    SqlQueueSource,
    WorkerGroup,
)
from lockwatch.settings.targets import Settings
from tests.fixtures.paths import ROOT

DSN = "postgresql://mon@127.0.0.1:6432/app"
REDIS_PASSWORD = "redis-pw-9f8e7d"


def load(tmp_path: Path, text: str) -> Settings | ConfigError:
    path = tmp_path / "lockwatch.yml"
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    try:
        return load_settings(path, {"REDIS_URL": f"redis://:{REDIS_PASSWORD}@127.0.0.1:6390/0"})
    except ConfigError as exc:
        return exc


def problems(tmp_path: Path, text: str) -> dict[str, ConfigProblem]:
    result = load(tmp_path, text)
    assert isinstance(result, ConfigError), "the config was accepted"
    return {problem.path: problem for problem in result.problems}


def target(body: str, defaults: str = "") -> str:
    return f"""
{defaults}targets:
  - name: main
    dsn: {DSN}
    interval: 2s
{textwrap.indent(textwrap.dedent(body), "    ")}"""


def test_queues_and_worker_groups_load_into_frozen_settings(tmp_path: Path) -> None:
    settings = load(
        tmp_path,
        target(
            """
            queues:
              - name: webhooks
                sql: SELECT count(*) AS depth FROM webhook_jobs
                window: 2m
                interval: 4s
              - name: jobs
                sql: SELECT queue AS queue, count(*) AS depth FROM jobs GROUP BY 1
                sub_queues: [mail, hooks]
              - name: events
                redis: ${REDIS_URL}
                key: events
                type: stream
                group: senders
                timeout: 500ms
              - name: procrastinate
                preset: procrastinate
                queue: default
              - name: emails
                preset: rq
                queue: emails
                redis: ${REDIS_URL}
            workers:
              - name: webhook-workers
                queues: [webhooks, jobs]
                processes: {cmdline: 'webhook_worker\\.py', children: false}
                sessions: ["webhook-worker-*"]
              - name: senders
                queues: [events]
                cgroup: {unit: sender.service, root: /tmp/cg}
              - name: mailers
                queues: [jobs/mail, emails]
                prometheus:
                  url: http://127.0.0.1:9090
                  cpu: sum(namedprocess_namegroup_cpu_seconds_total{groupname="mail"})
                interval: 10s
            """,
            defaults="defaults:\n  queues: {window: 90s, min_growth: 0.5, stall_cpu: 0.05}\n",
        ),
    )

    assert not isinstance(settings, ConfigError), str(settings)
    (main,) = settings.targets
    defaults = QueueThresholds(window=90.0, min_growth=0.5, stall_cpu=0.05)
    url = f"redis://:{REDIS_PASSWORD}@127.0.0.1:6390/0"
    assert main.queues == (
        Queue(
            "webhooks",
            SqlQueueSource("SELECT count(*) AS depth FROM webhook_jobs"),
            QueueThresholds(window=120.0, min_growth=0.5, stall_cpu=0.05),
            interval=4.0,
        ),
        Queue(
            "jobs",
            SqlQueueSource(
                "SELECT queue AS queue, count(*) AS depth FROM jobs GROUP BY 1",
                sub_queues=("mail", "hooks"),
            ),
            defaults,
        ),
        Queue(
            "events",
            RedisQueueSource(url, ("events",), type=RedisType.STREAM, group="senders", timeout=0.5),
            defaults,
        ),
        Queue(
            "procrastinate",
            preset_source("procrastinate", queue="default", redis_url=None, timeout=2.0),
            defaults,
            preset="procrastinate",
        ),
        Queue(
            "emails",
            RedisQueueSource(url, ("emails",), layout="rq"),
            defaults,
            preset="rq",
        ),
    )
    assert main.queues[1].names == ("jobs/mail", "jobs/hooks")
    assert main.workers == (
        WorkerGroup(
            "webhook-workers",
            ("webhooks", "jobs/mail", "jobs/hooks"),
            ProcessMatch(cmdline="webhook_worker\\.py", children=False),
            ("webhook-worker-*",),
        ),
        WorkerGroup(
            "senders",
            ("events",),
            CgroupCpu("system.slice/sender.service", Path("/tmp/cg")),
        ),
        WorkerGroup(
            "mailers",
            ("jobs/mail", "emails"),
            PrometheusCpu(
                "http://127.0.0.1:9090",
                'sum(namedprocess_namegroup_cpu_seconds_total{groupname="mail"})',
            ),
            interval=10.0,
        ),
    )
    assert REDIS_PASSWORD not in repr(main)


def test_every_queue_and_worker_problem_is_reported_at_once_with_its_path(
    tmp_path: Path,
) -> None:
    found = problems(
        tmp_path,
        target(
            """
            queues:
              - name: webhooks
                sql: SELECT 1 AS depth
                window: 3s
              - name: webhooks
                sql: SELECT 2 AS depth
              - name: both
                sql: SELECT 1 AS depth
                redis: redis://127.0.0.1:6390
              - name: neither
                window: 1m
              - name: lost
                preset: sidekiq
              - name: brokerless
                preset: celery
              - name: stream
                redis: ${REDIS_URL}
                key: [a, b]
                type: stream
              - name: typo
                redis: http://:pw-in-url@127.0.0.1:6390
                key: k
                typ: list
              - name: fast
                sql: SELECT 1 AS depth
                interval: 1s
                min_growth: -1
            workers:
              - name: w
                queues: [webhoks]
                processes: {cmdline: "(unclosed"}
                cgroup: {path: ../escape}
              - name: idle
                queues: [webhooks]
              - name: glob
                queues: [webhooks]
                sessions: ["worker-[0-9]"]
            """
        ),
    )

    assert (
        "3s holds fewer than 3 samples taken every 2s"
        in found["targets[0].queues[0].window"].message
    )
    assert found["targets[0].queues[1].name"].message == (
        "'webhooks' is already used at targets[0].queues[0]"
    )
    assert found["targets[0].queues[2]"].message == "set only one of 'sql', 'redis'"
    assert found["targets[0].queues[3]"].message == (
        "set one of 'sql', 'redis' (with 'key') or 'preset'"
    )
    assert "unknown preset 'sidekiq'" in found["targets[0].queues[4].preset"].message
    assert found["targets[0].queues[5]"].message == (
        "the celery preset needs 'redis' (the broker's URL)"
    )
    assert found["targets[0].queues[6].key"].message == "a stream queue reads one key"
    assert "must start with redis://" in found["targets[0].queues[7].redis"].message
    assert "did you mean 'type'?" in found["targets[0].queues[7].typ"].message
    assert "must be at least the target's interval (2s)" in (
        found["targets[0].queues[8].interval"].message
    )
    assert found["targets[0].queues[8].min_growth"].message == "must be greater than 0"
    assert "did you mean 'webhooks'?" in found["targets[0].workers[0].queues[0]"].message
    assert "set at most one of" in found["targets[0].workers[0]"].message
    assert "not a regular expression" in found["targets[0].workers[0].processes.cmdline"].message
    assert "without '..'" in found["targets[0].workers[0].cgroup.path"].message
    assert "bind the group with one of" in found["targets[0].workers[1]"].message
    assert "* and ? only" in found["targets[0].workers[2].sessions[0]"].message
    assert found["targets[0].queues[0].window"].line == 9
    everything = " ".join(p.message for p in found.values())
    assert REDIS_PASSWORD not in everything
    assert "pw-in-url" not in everything


@pytest.mark.parametrize(
    ("entry", "path", "message"),
    [
        ("sql: SELECT 1 AS depth\ngroup: g", "group", "does not go with 'sql'"),
        ("preset: procrastinate\nredis: redis://127.0.0.1:1", "redis", "reads no Redis"),
        ("redis: redis://127.0.0.1:1", "", "'redis' needs 'key' (or a 'preset')"),
        ("redis: redis://127.0.0.1:1\nkey: k\ngroup: g", "group", "only a stream has groups"),
        ("sql: SELECT 1 AS depth\nsub_queues: []", "sub_queues", "needs at least one sub-queue"),
        (
            "sql: SELECT 1 AS depth\nsub_queues: [a, a]",
            "sub_queues[1]",
            "'a' is already listed at targets[0].queues[0].sub_queues[0]",
        ),
    ],
)
def test_a_source_with_keys_of_another_kind_is_refused(
    tmp_path: Path, entry: str, path: str, message: str
) -> None:
    body = "queues:\n  - name: q\n" + textwrap.indent(entry, "    ") + "\n"
    found = problems(tmp_path, target(body))

    where = "targets[0].queues[0]" + (f".{path}" if path else "")
    assert message in found[where].message


def test_the_readme_queue_example_loads(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Queues and workers", 1)[1]
    example = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "lockwatch.yml"
    path.write_text(example)

    settings = load_settings(path, {"APP_DSN": DSN, "REDIS_URL": "redis://127.0.0.1:6390/0"})

    (app,) = settings.targets
    assert [q.name for q in app.queues] == ["webhooks", "emails"]
    assert app.workers[0].sessions == ("webhook-worker-*",)


def test_the_slow_failure_thresholds_load_from_defaults_and_each_queue(tmp_path: Path) -> None:
    settings = load(
        tmp_path,
        target(
            """
            queues:
              - name: reports
                preset: pg-boss
                queue: reports
                max_job_duration: 10m
                capacity_window: 30m
              - name: mail
                preset: procrastinate
                max_job_duration: auto
            """,
            defaults="defaults:\n  queues: {no_consumer_after: 5m, capacity_fraction: 0.5}\n",
        ),
    )
    assert not isinstance(settings, ConfigError), str(settings)
    reports, mail = (queue.thresholds for queue in settings.targets[0].queues)
    assert (reports.no_consumer_after, reports.capacity_fraction) == (300.0, 0.5)
    assert (reports.max_job_duration, reports.capacity_window) == (600.0, 1800.0)
    assert mail.max_job_duration == "auto" and mail.job_duration_floor == 60.0
    bad = problems(
        tmp_path,
        target(
            """
            queues:
              - {name: q, preset: procrastinate, capacity_min_minutes: 0, no_consumer_after: 0s}
            """
        ),
    )
    assert set(bad) == {
        "targets[0].queues[0].capacity_min_minutes",
        "targets[0].queues[0].no_consumer_after",
    }

from __future__ import annotations

import ipaddress
import re
import textwrap
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockwatch.config.load import ConfigError, ConfigProblem, load_settings, settings_from_flags
from lockwatch.model.locks import LockKey
from lockwatch.settings.fields import parse_duration
from lockwatch.settings.locks import AllowedHolders, LockRole, LockSettings, NamedLock
from lockwatch.settings.targets import Settings, Target
from lockwatch.settings.web import DEFAULT_LISTEN
from tests.fixtures.paths import ROOT

EXAMPLE = ROOT / "docs" / "lockwatch.example.yml"
DSN = "postgresql://mon@127.0.0.1:6432/app"
PASSWORD = "hunter2-secret"


def write(tmp_path: Path, text: str, name: str = "lockwatch.yml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def problems_of(path: Path, environ: Mapping[str, str] | None = None) -> tuple[ConfigProblem, ...]:
    with pytest.raises(ConfigError) as caught:
        load_settings(path, environ or {})
    return caught.value.problems


def minimal(target_extra: str = "", top_extra: str = "") -> str:
    return f"""
{top_extra}targets:
  - name: main
    dsn: {DSN}
{target_extra}"""


# -- a good file --------------------------------------------------------------


def test_a_full_file_loads_into_the_expected_frozen_settings(tmp_path: Path) -> None:
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "reports-dsn").write_text("host=db dbname=reports\n\n")
    path = write(
        tmp_path,
        """
        listen: "[::1]:9999"
        state_dir: state
        defaults:
          interval: 20s
          statement_timeout: 3s
          locks: {max_hold: 10m, convoy_waiters: 3, ignore: [1234]}
        targets:
          - name: orders
            dsn: ${ORDERS_DSN}
            interval: 1.5s
            locks:
              max_hold: 2m
              top_n: 5
              ignore: [99, "7,13"]
              named:
                - name: webhook-delivery
                  key: 42
                  max_hold: 30s
                  orphan_after: 1m
                - name: nightly-report
                  key: " 7, 13"
                  role: leader
                  database: app
                  allowed_holders:
                    applications: ["report-*"]
                    addresses: ["10.0.0.0/8", "::1", local]
                - name: good_job-liveness
                  key: -987654321
                  ignore: true
          - name: reports
            dsn_file: secrets/reports-dsn
        """,
    )

    settings = load_settings(path, {"ORDERS_DSN": DSN})

    orders = Target(
        name="orders",
        dsn=DSN,
        interval=1.5,
        connect_timeout=5.0,
        statement_timeout=3.0,
        locks=LockSettings(
            max_hold=120.0,
            orphan_after=600.0,
            convoy_waiters=3,
            convoy_wait=5.0,
            top_n=5,
            ignore=(LockKey.bigint(99), LockKey.int_pair(7, 13)),
            named=(
                NamedLock("webhook-delivery", LockKey.bigint(42), max_hold=30.0, orphan_after=60.0),
                NamedLock(
                    "nightly-report",
                    LockKey.int_pair(7, 13),
                    role=LockRole.LEADER,
                    database="app",
                    allowed=AllowedHolders(
                        applications=("report-*",),
                        networks=(
                            ipaddress.ip_network("10.0.0.0/8"),
                            ipaddress.ip_network("::1/128"),
                        ),
                        local=True,
                    ),
                ),
                NamedLock("good_job-liveness", LockKey.bigint(-987654321), ignore=True),
            ),
        ),
    )
    reports = Target(
        name="reports",
        dsn="host=db dbname=reports",
        interval=20.0,
        statement_timeout=3.0,
        locks=LockSettings(max_hold=600.0, convoy_waiters=3, ignore=(LockKey.bigint(1234),)),
    )
    assert settings == Settings(
        targets=(orders, reports),
        listen="[::1]:9999",
        state_dir=tmp_path / "state",
        source=path,
        # what discovered targets inherit: defaults:, by field
        target_defaults=(
            ("interval", 20.0),
            ("statement_timeout", 3.0),
            ("locks", reports.locks),
        ),
    )
    assert orders.dsn == settings.targets[0].dsn  # dsn is repr=False, so compare it on its own
    with pytest.raises(AttributeError):
        settings.targets[0].name = "changed"  # type: ignore[misc]  # frozen: the test checks it refuses


def test_a_minimal_file_gets_every_default(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, minimal()), {})

    assert settings.listen == DEFAULT_LISTEN
    assert settings.state_dir is None
    assert settings.targets == (Target(name="main", dsn=DSN),)


def test_yaml_anchors_and_merge_keys_share_settings_between_targets(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
        targets:
          - &base
            name: a
            dsn: {DSN}
            interval: 3s
          - <<: *base
            name: b
        """,
    )

    targets = load_settings(path, {}).targets

    assert [(t.name, t.interval) for t in targets] == [("a", 3.0), ("b", 3.0)]


# -- a broken file: every problem at once -------------------------------------


def test_every_problem_in_a_broken_file_is_reported_at_once_with_path_and_line(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        """
        listen: localhost
        defaults:
          interval: 50ms
          locks: {top_n: 5000}
        targets:
          - name: orders
            dsn: host=db
            locks:
              max_hold: 5 minutes
              ignore: [42]
              named:
                - name: webhook
                  key: 42
                - name: webhook
                  key: "1,99999999999"
                  role: leeder
                  allowed_holders:
                    addresses: [10.0.0.0/33]
          - name: orders
            dns: host=db
        """,
    )

    problems = problems_of(path)

    found = {(p.path, p.line) for p in problems}
    assert found == {
        ("listen", 1),
        ("defaults.interval", 3),
        ("defaults.locks.top_n", 4),
        ("targets[0].locks.max_hold", 9),
        ("targets[0].locks.named[0].key", 13),
        ("targets[0].locks.named[1].name", 14),
        ("targets[0].locks.named[1].key", 15),
        ("targets[0].locks.named[1].role", 16),
        ("targets[0].locks.named[1].allowed_holders.addresses[0]", 18),
        ("targets[1].name", 19),
        ("targets[1].dns", 20),
        ("targets[1]", 19),
    }
    assert all(p.file == str(path) for p in problems)
    assert [p.line for p in problems] == sorted(p.line or 0 for p in problems)
    text = str(ConfigError(problems))
    assert (
        f"{path}:9: targets[0].locks.max_hold: not a duration: '5 minutes' (use 500ms, 5s, 2m, 1h)"
        in text.splitlines()
    )
    assert "did you mean 'leader'?" in text
    assert "did you mean 'dsn'?" in text
    assert "must be at least 100ms" in text
    assert "must be at most 1000" in text
    assert "int4 pair key out of range" in text
    assert "both named and ignored" in text
    assert "'orders' is already used at targets[0]" in text
    assert "missing required key 'dsn' (or 'dsn_file')" in text


def test_a_yaml_syntax_error_is_one_problem_with_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, f"targets:\n  - name: [a\n    dsn: postgresql://u:{PASSWORD}@db/x\n")

    (problem,) = problems_of(path)

    assert problem.message.startswith("YAML syntax error")
    assert problem.line in (2, 3)
    assert PASSWORD not in str(problem)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the file is empty"),
        ("# only a comment\n", "the file is empty"),
        ("- a\n- b\n", "the top level must be a mapping"),
        ("listen: 127.0.0.1:1\n", "needs at least one target (or target_sources to find them)"),
        ("targets: []\n", "needs at least one target"),
        ("targets: {name: a}\n", "expected a list, got a mapping"),
    ],
)
def test_a_file_without_targets_is_rejected(tmp_path: Path, text: str, message: str) -> None:
    (problem,) = problems_of(write(tmp_path, text))

    assert message in problem.message


def test_an_unknown_key_far_from_any_known_one_lists_the_choices(tmp_path: Path) -> None:
    (problem,) = problems_of(write(tmp_path, minimal(top_extra="colour: blue\n")))

    assert problem.path == "colour"
    assert (
        "expected one of: auth_modules, defaults, external_url, incidents, jobs, listen, notify, "
        "pings, replica, "
        "shard, state_dir, target_sources, targets" in problem.message
    )


def test_a_misspelt_nested_key_gets_a_did_you_mean_hint(tmp_path: Path) -> None:
    (problem,) = problems_of(write(tmp_path, minimal("    locks: {max_hlod: 5m}\n")))

    assert (problem.path, problem.line) == ("targets[0].locks.max_hlod", 4)
    assert problem.message == "unknown key (did you mean 'max_hold'?)"


@pytest.mark.parametrize(
    ("extra", "path", "message"),
    [
        (
            "    locks: [max_hold]\n",
            "targets[0].locks",
            "expected a mapping (key: value), got a list",
        ),
        ("    interval: [5s]\n", "targets[0].interval", "expected a single value, got a list"),
        ("    interval:\n", "targets[0].interval", "has no value"),
        ("    interval: 0\n", "targets[0].interval", "must be at least 100ms"),
        ("    connect_timeout: 0s\n", "targets[0].connect_timeout", "must be greater than 0"),
        ("    statement_timeout: -1s\n", "targets[0].statement_timeout", "negative duration"),
        ("    locks: {convoy_waiters: 0}\n", "targets[0].locks.convoy_waiters", "at least 1"),
        ("    locks: {top_n: -1}\n", "targets[0].locks.top_n", "must be at least 0"),
        ("    locks: {top_n: 2.5}\n", "targets[0].locks.top_n", "not a whole number"),
        ("    locks: {ignore: [true]}\n", "targets[0].locks.ignore[0]", "not an advisory lock key"),
        ("    locks: {ignore: [1, 1]}\n", "targets[0].locks.ignore[1]", "already listed"),
        ("    interval: 1s\n    interval: 2s\n", "targets[0].interval", "more than once"),
    ],
)
def test_a_bad_value_is_reported_at_its_path(
    tmp_path: Path, extra: str, path: str, message: str
) -> None:
    (problem,) = problems_of(write(tmp_path, minimal(extra)))

    assert problem.path == path
    assert message in problem.message


def named(*locks: str) -> str:
    """A target's locks.named list, from one "key: value" block per lock."""
    lines = ["    locks:", "      named:"]
    for lock in locks:
        first, *rest = textwrap.dedent(lock).strip("\n").splitlines()
        lines.append(f"        - {first}")
        lines.extend(f"          {line}" for line in rest)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("locks", "path", "message"),
    [
        (("name: a\nkey: 1", "name: b\nkey: 1"), "named[1].key", "already named 'a'"),
        (
            ("name: a\nkey: 1\ndatabase: x", "name: b\nkey: 1"),
            "named[1].key",
            "already named 'a'",
        ),
        (("name: a\nkey: 1", "name: a\nkey: 2"), "named[1].name", "already used"),
        (("name: a b\nkey: 1",), "named[0].name", "not a valid name"),
        (("name: a",), "named[0]", "missing required key 'key'"),
        (("name: a\nkey: 99999999999999999999",), "named[0].key", "bigint key out of range"),
        (("name: a\nkey: 1\nrole: boss",), "named[0].role", "unknown role 'boss'"),
        (("name: a\nkey: 1\nignore: maybe",), "named[0].ignore", "expected true or false"),
        (
            ("name: a\nkey: 1\nallowed_holders: {addresses: [10.1.2.3/8]}",),
            "named[0].allowed_holders.addresses[0]",
            "did you mean 10.0.0.0/8?",
        ),
        (
            ("name: a\nkey: 1\nallowed_holders: {applications: billing}",),
            "named[0].allowed_holders.applications",
            "expected a list",
        ),
    ],
)
def test_a_bad_named_lock_is_reported_at_its_path(
    tmp_path: Path, locks: tuple[str, ...], path: str, message: str
) -> None:
    (problem,) = problems_of(write(tmp_path, minimal(named(*locks))))

    assert problem.path == f"targets[0].locks.{path}"
    assert message in problem.message


def test_the_same_key_named_in_two_databases_is_fine(tmp_path: Path) -> None:
    text = minimal(named("name: a\nkey: 1\ndatabase: x", "name: b\nkey: 1\ndatabase: y"))

    (target,) = load_settings(write(tmp_path, text), {}).targets

    assert [lock.database for lock in target.locks.named] == ["x", "y"]


def test_a_key_ignored_by_the_defaults_and_named_for_every_database_is_ambiguous(
    tmp_path: Path,
) -> None:
    text = minimal(named("name: a\nkey: 5"), top_extra="defaults: {locks: {ignore: [5]}}\n")

    (problem,) = problems_of(write(tmp_path, text))

    assert problem.path == "targets[0].locks.named[0].key"
    assert "ignored (at defaults.locks.ignore[0])" in problem.message


@pytest.mark.parametrize(
    ("listen", "message"),
    [
        ("localhost", "not host:port"),
        ("127.0.0.1:0", "port must be a number from 1 to 65535"),
        ("127.0.0.1:65536", "port must be a number from 0 to 65535"),
        ("::1:10057", "IPv6 addresses go in brackets"),
        ("[::g]:10057", "not an IPv6 address"),
        (":10057", "not host:port"),
    ],
)
def test_a_bad_listen_address_is_rejected(tmp_path: Path, listen: str, message: str) -> None:
    (problem,) = problems_of(write(tmp_path, minimal(top_extra=f'listen: "{listen}"\n')))

    assert problem.path == "listen"
    assert message in problem.message


# -- environment variables ----------------------------------------------------


def test_a_variable_is_replaced_by_its_value(tmp_path: Path) -> None:
    path = write(tmp_path, "targets:\n  - name: ${NAME}-db\n    dsn: ${DSN}\n")

    (target,) = load_settings(path, {"NAME": "orders", "DSN": DSN}).targets

    assert (target.name, target.dsn) == ("orders-db", DSN)


def test_a_missing_variable_is_named_in_the_error(tmp_path: Path) -> None:
    path = write(tmp_path, "targets:\n  - name: a\n    dsn: ${ORDERS_DSN}\n")

    (problem,) = problems_of(path, {"OTHER": "x"})

    assert (problem.path, problem.line) == ("targets[0].dsn", 3)
    assert problem.message == "environment variable ORDERS_DSN is not set"


def test_a_doubled_dollar_escapes_a_literal_variable_reference(tmp_path: Path) -> None:
    path = write(
        tmp_path, minimal(named("name: a\nkey: 1\nallowed_holders: {applications: ['$${X}-*']}"))
    )

    (target,) = load_settings(path, {"X": "never used"}).targets

    assert target.locks.named[0].allowed.applications == ("${X}-*",)


def test_a_malformed_variable_reference_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "targets:\n  - name: a\n    dsn: ${DSN\n")

    (problem,) = problems_of(path, {"DSN": DSN})

    assert "unterminated '${'" in problem.message


def test_a_bad_value_from_a_variable_is_not_shown(tmp_path: Path) -> None:
    path = write(tmp_path, minimal("    interval: ${INTERVAL}\n"))

    (problem,) = problems_of(path, {"INTERVAL": "soon-ish"})

    assert "soon-ish" not in str(problem)
    assert "not a duration: (the value of ${INTERVAL}, not shown)" in problem.message


# -- dsn_file -------------------------------------------------------------------


def test_a_dsn_file_relative_to_the_config_is_read_and_stripped(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "dsn").write_text(f"{DSN}  \n")
    path = write(tmp_path / "conf", "targets:\n  - name: a\n    dsn_file: dsn\n")

    (target,) = load_settings(path, {}).targets

    assert target.dsn == DSN


def test_a_dsn_file_path_may_come_from_the_environment(tmp_path: Path) -> None:
    (tmp_path / "orders-dsn").write_text(DSN)
    path = write(
        tmp_path, "targets:\n  - name: a\n    dsn_file: ${CREDENTIALS_DIRECTORY}/orders-dsn\n"
    )

    (target,) = load_settings(path, {"CREDENTIALS_DIRECTORY": str(tmp_path)}).targets

    assert target.dsn == DSN


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "no such file: "), ("\n  \n", "file is empty: "), (b"\xff\xfe", "cannot read ")],
)
def test_a_missing_or_empty_dsn_file_is_named_in_the_error(
    tmp_path: Path, content: str | bytes | None, message: str
) -> None:
    if isinstance(content, str):
        (tmp_path / "dsn").write_text(content)
    elif isinstance(content, bytes):
        (tmp_path / "dsn").write_bytes(content)
    path = write(tmp_path, "targets:\n  - name: a\n    dsn_file: dsn\n")

    (problem,) = problems_of(path)

    assert problem.path == "targets[0].dsn_file"
    assert problem.message.startswith(f"{message}{tmp_path / 'dsn'}")


def test_a_target_with_both_dsn_and_dsn_file_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "dsn").write_text(DSN)
    path = write(tmp_path, f"targets:\n  - name: a\n    dsn: {DSN}\n    dsn_file: dsn\n")

    (problem,) = problems_of(path)

    assert (problem.path, problem.line) == ("targets[0]", 2)
    assert "either 'dsn' or 'dsn_file', not both" in problem.message


# -- secrets --------------------------------------------------------------------


@pytest.mark.parametrize(
    "dsn",
    [
        f"host=db password={PASSWORD} port",
        f"host=db password={PASSWORD} bogus=1",
        f"host=db password='{PASSWORD}",
        f"postgresql://app:{PASSWORD}@[::1/x",
        f"postgresql://app:{PASSWORD}@db:notaport/x",
        f"postgresql://app:{PASSWORD}@db/x?sslmode=sometimes",
    ],
)
def test_an_invalid_dsn_is_reported_without_its_password(tmp_path: Path, dsn: str) -> None:
    path = write(tmp_path, "targets:\n  - name: a\n    dsn: ${DSN}\n  - name: b\n    dsn_file: f\n")
    (tmp_path / "f").write_text(dsn)

    problems = problems_of(path, {"DSN": dsn})

    assert [p.path for p in problems] == ["targets[0].dsn", "targets[1].dsn_file"]
    text = str(ConfigError(problems))
    assert PASSWORD not in text
    assert "app" not in text and "host=db" not in text
    assert "the DSN is not shown" in text


def test_a_literal_dsn_with_a_password_is_not_echoed_by_a_syntax_or_type_error(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        f"""
        targets:
          - name: a
            dsn: [postgresql://app:{PASSWORD}@db/x]
          - name: b
            dsn: "postgresql://app:{PASSWORD}@db:0/x"
        """,
    )

    text = str(ConfigError(problems_of(path)))

    assert PASSWORD not in text
    assert text.count("\n") == 1


def test_an_empty_dsn_is_rejected(tmp_path: Path) -> None:
    (problem,) = problems_of(
        write(tmp_path, "targets:\n  - name: a\n    dsn: ${DSN}\n"), {"DSN": ""}
    )

    assert problem.message == "is empty"


# -- durations ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("500ms", 0.5),
        ("5s", 5.0),
        ("2m", 120.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),
        ("1m30s250ms", 90.25),
        ("1.5s", 1.5),
        (".5s", 0.5),
        ("10", 10.0),
        ("2.25", 2.25),
        (" 5s ", 5.0),
        ("0s", 0.0),
        (7, 7.0),
        (0.1, 0.1),
    ],
)
def test_parse_duration_reads_what_operators_write(value: str | float, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize(
    "value", ["5 minutes", "5sec", "s", "", "5x", "1h-30m", "5S", "1d", "nan", "5 s", "1e3"]
)
def test_parse_duration_rejects_anything_else_with_a_hint(value: str) -> None:
    with pytest.raises(
        ValueError, match=re.escape(f"not a duration: {value!r} (use 500ms, 5s, 2m, 1h)")
    ):
        parse_duration(value)


@pytest.mark.parametrize("value", ["-5s", "-1", -1, -0.5])
def test_parse_duration_rejects_negative_durations(value: str | float) -> None:
    with pytest.raises(ValueError, match="negative duration"):
        parse_duration(value)


@pytest.mark.parametrize("value", [float("inf"), float("nan"), True])
def test_parse_duration_rejects_numbers_that_are_no_durations(value: float) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(value)


UNIT_SECONDS = {"ms": Fraction(1, 1000), "s": Fraction(1), "m": Fraction(60), "h": Fraction(3600)}


@given(n=st.integers(min_value=0, max_value=10**12), unit=st.sampled_from(sorted(UNIT_SECONDS)))
def test_a_whole_number_of_any_unit_is_that_many_units_in_seconds(n: int, unit: str) -> None:
    assert parse_duration(f"{n}{unit}") == float(n * UNIT_SECONDS[unit])


# -- flags ----------------------------------------------------------------------


def test_flags_make_one_default_target_with_default_settings() -> None:
    settings = settings_from_flags(dsn=DSN)

    assert settings == Settings(targets=(Target(name="default", dsn=DSN),))


def test_flags_override_the_defaults() -> None:
    settings = settings_from_flags(
        dsn=DSN,
        listen="0.0.0.0:9000",
        interval=2,
        max_hold=60,
        orphan_after=120.5,
        convoy_waiters=4,
        state_dir=Path("/var/lib/lockwatch"),
    )

    (target,) = settings.targets
    assert (settings.listen, settings.state_dir) == ("0.0.0.0:9000", Path("/var/lib/lockwatch"))
    assert target.interval == 2.0
    assert (target.locks.max_hold, target.locks.orphan_after) == (60.0, 120.5)
    assert target.locks.convoy_waiters == 4


def test_every_bad_flag_is_reported_at_once_without_the_password(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("")

    with pytest.raises(ConfigError) as caught:
        settings_from_flags(
            dsn=f"host=db password={PASSWORD} bogus=1",
            listen="nowhere",
            interval=0.01,
            max_hold=0,
            orphan_after=-1,
            convoy_waiters=0,
            state_dir=a_file,
        )

    problems = caught.value.problems
    assert [p.path for p in problems] == [
        "--dsn",
        "--listen",
        "--interval",
        "--max-hold",
        "--orphan-after",
        "--convoy-waiters",
        "--state-dir",
    ]
    assert {(p.file, p.line) for p in problems} == {("<command line>", None)}
    assert PASSWORD not in str(caught.value)
    assert "<command line>: --max-hold: must be greater than 0" in str(caught.value).splitlines()


# -- the documented example -------------------------------------------------------


def test_the_example_file_loads_cleanly(tmp_path: Path) -> None:
    (tmp_path / "reports-dsn").write_text("host=db dbname=reports user=lockwatch\n")
    (tmp_path / "telegram-token").write_text("123456:token\n")
    (tmp_path / "slack-bot-token").write_text("xoxb-1-2-token\n")
    for url in ("slack-webhook-url", "alert-webhook-url"):
        (tmp_path / url).write_text("https://example.invalid/hook\n")
    (tmp_path / "pgbouncer-admin-dsn").write_text("host=db port=6432 dbname=pgbouncer user=stats\n")
    (tmp_path / "ping-token").write_text("a-long-random-ping-token\n")
    (tmp_path / "orders-actions-dsn").write_text("host=db dbname=orders user=oncall\n")
    values = (line.split(" #")[0] for line in EXAMPLE.read_text().splitlines())
    referenced = {name for line in values for name in re.findall(r"^[^#]*\$\{(\w+)\}", line)}
    assert referenced == {"ORDERS_DSN", "CREDENTIALS_DIRECTORY"}

    settings = load_settings(EXAMPLE, {"ORDERS_DSN": DSN, "CREDENTIALS_DIRECTORY": str(tmp_path)})

    orders, reports = settings.targets
    assert [lock.name for lock in orders.locks.named] == [
        "webhook-delivery",
        "nightly-report",
        "good_job-liveness",
    ]
    assert orders.locks.ignored("app", LockKey.parse("7,13")) is False
    assert orders.locks.ignored("other", LockKey.parse("7,13")) is True
    assert reports.dsn == "host=db dbname=reports user=lockwatch"
    assert orders.actions.dsn == "host=db dbname=orders user=oncall"
    assert reports.actions.dsn is None
    assert [channel.name for channel in settings.notify.channels] == [
        "ops-telegram",
        "team-slack-app",
        "team-slack",
        "receiver",
        "alertmanager",
    ]
    assert [queue.name for queue in orders.queues] == ["webhooks", "events", "reports"]
    assert [group.name for group in orders.workers] == ["webhook-workers", "senders", "reporters"]
    assert orders.pgbouncer is not None and "dbname=pgbouncer" in orders.pgbouncer.dsn
    nightly, hourly = settings.jobs
    assert (nightly.target, nightly.query is not None, nightly.max_duration) == (
        "orders",
        True,
        1800,
    )
    assert nightly.schedule is not None and nightly.schedule.timezone == "Europe/Berlin"
    assert (hourly.target, hourly.query) == ("orders", None)
    assert settings.pings.token == "a-long-random-ping-token"

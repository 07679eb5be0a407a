"""The README's "Watching your own database", walked as written (issue 24):
every SQL statement, shell command and YAML block is read out of README.md,
its placeholders (the password ``...``, ``db:5432``, ``/var/lib/lockwatch``,
``lockwatch.yml``) filled with a real server's, and run; what the prose around
them claims (the address it serves on, the first poll's log line, the names
of the catalogued keys, what each command prints and exits with) is checked
against what the program does. A README edit that breaks a command, or a
program change the README does not follow, fails here; a command the walk
does not know fails too, until the walk is taught it."""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests
import yaml

from lockwatch.demo.pgbinaries import embedded_bin_dir
from lockwatch.demo.pgcluster import LocalCluster
from lockwatch.model.catalogue.registry import ENTRIES
from lockwatch.settings.web import DEFAULT_LISTEN
from tests.fixtures.paths import ROOT
from tests.fixtures.postgres import free_port, wait_until

pytestmark = [pytest.mark.pg, pytest.mark.slow]

SECTION = "Watching your own database"
README_DSN = "postgresql://lockwatch:...@db:5432/app"
README_STATE_DIR = "/var/lib/lockwatch"


def section(title: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def fenced(text: str) -> list[tuple[str, str]]:
    """The fenced blocks of ``text``, in order: (language, body)."""
    return [(m[1], m[2]) for m in re.finditer(r"```(\w*)\n(.*?)```", text, re.S)]


def shell_commands(body: str) -> list[list[str]]:
    """A ``sh`` block's commands as argv (leading VAR=value words included),
    continued lines joined, comments left out."""
    joined = re.sub(r"\\\n", " ", body)
    lines = (shlex.split(line, comments=True) for line in joined.splitlines())
    return [words for words in lines if words]


def sql_statements(body: str) -> list[str]:
    return [s.strip() for s in body.split(";") if s.strip()]


@dataclass
class Walk:
    """The README's section and the real server its placeholders stand for."""

    server: LocalCluster
    password: str
    state_dir: Path
    config: Path
    text: str = field(default_factory=lambda: section(SECTION))

    @property
    def dsn(self) -> str:
        return f"postgresql://lockwatch:{self.password}@{self.server.host}:{self.server.port}/app"

    def blocks(self, language: str) -> list[str]:
        return [body for lang, body in fenced(self.text) if lang == language]

    def fill(self, word: str) -> str:
        """A README word with its placeholders filled with the real ones."""
        word = word.replace(README_DSN, self.dsn).replace(README_STATE_DIR, str(self.state_dir))
        return str(self.config) if word == "lockwatch.yml" else word

    def env(self) -> dict[str, str]:
        # What the README's commands take from the environment: $DSN, $APP_DSN,
        # and the variables its YAML uses (${APP_DSN}, ${REDIS_URL}).
        return {
            **os.environ,
            "DSN": self.dsn,
            "APP_DSN": self.dsn,
            "REDIS_URL": "redis://127.0.0.1:1/0",
        }

    def argv(self, words: list[str]) -> tuple[dict[str, str], list[str]]:
        """The environment and the command of a README command line, filled in:
        ``lockwatch`` is this checkout's, as ``python -m lockwatch``."""
        env = self.env()
        while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
            name, _, value = words.pop(0).partition("=")
            env[name] = self.fill(value)
        assert words[0] == "lockwatch", f"the walk runs lockwatch commands, not {words}"

        def variable(found: re.Match[str]) -> str:
            return env[found[1] or found[2]]

        expanded = [self.fill(re.sub(r"\$\{(\w+)\}|\$(\w+)", variable, w)) for w in words]
        return env, [sys.executable, "-m", "lockwatch", *expanded[1:]]

    def run(self, words: list[str]) -> subprocess.CompletedProcess[str]:
        env, argv = self.argv(list(words))
        return subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=120, cwd=ROOT, check=False
        )


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walk]:
    home = tmp_path_factory.mktemp("readme")
    with LocalCluster(embedded_bin_dir()) as server:
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            admin.execute("CREATE DATABASE app")
        yield Walk(server, "pw-" + secrets.token_hex(8), home / "state", home / "lockwatch.yml")


@pytest.fixture(scope="module")
def role(walk: Walk) -> Walk:
    """The README's role, made by its own SQL, password filled in."""
    (block,) = walk.blocks("sql")
    with psycopg.connect(walk.server.dsn(dbname="app"), autocommit=True) as admin:
        for statement in sql_statements(block):
            admin.execute(statement.replace("'...'", f"'{walk.password}'"))
    with psycopg.connect(walk.dsn) as conn:
        row = conn.execute("SELECT pg_has_role('pg_monitor', 'USAGE')").fetchone()
    assert row == (True,), "the README's role has no pg_monitor"
    return walk


@pytest.fixture(scope="module")
def config(role: Walk) -> Walk:
    """The section's config file: its one YAML block that is a whole config."""
    whole = [body for body in role.blocks("yaml") if body.startswith("targets:")]
    assert len(whole) == 1, "the walk expects one whole config in the section"
    role.config.write_text(whole[0], encoding="utf-8")
    return role


@dataclass
class Holders:
    """Locks as the section's story has them: lock 42 held by an idle worker
    with two waiting, and Prisma's migration lock held."""

    worker: psycopg.Connection[Any]
    waiters: list[psycopg.Connection[Any]]
    prisma: psycopg.Connection[Any]


@pytest.fixture
def holders(role: Walk) -> Iterator[Holders]:
    def session(name: str) -> psycopg.Connection[Any]:
        return psycopg.connect(
            role.server.dsn(dbname="app"), application_name=name, autocommit=True
        )

    worker, prisma = session("webhook-worker-1"), session("prisma-migrate")
    worker.execute("SELECT pg_advisory_lock(42)")
    prisma.execute("SELECT pg_advisory_lock(72707369)")
    waiters = [session(f"webhook-worker-{n}") for n in (2, 3)]
    for waiter in waiters:
        waiter.execute("SET statement_timeout = '60s'")
        waiter.pgconn.send_query(b"SELECT pg_advisory_lock(42)")
    with closing(session("look")) as look:
        wait_until(
            lambda: (
                look.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                ).fetchone()
                == (2,)
            ),
            message="two waiting on lock 42",
        )
    yield Holders(worker, waiters, prisma)
    for conn in (*waiters, worker, prisma):
        conn.close()


def test_the_catalogued_names_are_the_ones_lockwatch_gives_in_database_app(walk: Walk) -> None:
    paragraph = walk.text.split("Keys that well-known software takes", 1)[1].split("They keep", 1)[
        0
    ]
    shown, *names = (" ".join(n.split()) for n in re.findall(r"`([^`]+)`", paragraph))
    given = {name: key for entry in ENTRIES for key, name in entry.keys("app").items()}
    assert set(names) == set(given), "the README's list is not the catalogue's"
    name, key = re.fullmatch(r"(.+) \((-?\d+)\)", shown).groups()  # type: ignore[union-attr]
    assert given[name].render() == key


def test_the_zero_config_start_serves_polls_and_logs_as_the_readme_says(
    role: Walk, tmp_path: Path
) -> None:
    (start,) = shell_commands(role.blocks("sh")[0])
    assert start[start.index("lockwatch") + 1] == "run"
    claimed = re.search(r"It serves on `([^`]+)`", role.text)
    assert claimed is not None and claimed[1] == DEFAULT_LISTEN
    env, argv = role.argv(list(start))
    # On a free port, through the variable the daemon documents: the command stays as written.
    port = free_port()
    env["LOCKWATCH_WEB_LISTEN_ADDRESS"] = f"127.0.0.1:{port}"
    log = tmp_path / "lockwatch.log"
    with log.open("wb") as out:
        daemon = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    base = f"http://127.0.0.1:{port}"
    try:
        example = re.search(r"After the first poll .*?\(`([^`]+)`\)", role.text, re.S)
        assert example is not None
        pattern = re.escape(example[1])
        pattern = re.sub(r"\d+", r"\\d+", pattern).replace(r"\\d+", r"\d+")
        wait_until(lambda: re.search(pattern, log.read_text()), timeout=60, message=pattern)
        for path in ("/metrics", "/", "/api/v1/findings"):
            assert requests.get(f"{base}{path}", timeout=5).status_code == 200, path
        metrics = requests.get(f"{base}/metrics", timeout=5).text
        assert 'lockwatch_up{target="default"} 1.0' in metrics
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=30) == 0, log.read_text()
    assert (role.state_dir / "target-default.json").exists(), "--state-dir kept nothing"
    help_text = role.run(["lockwatch", "run", "--help"]).stdout
    for word in re.findall(r"`--log\.format=(\w+)` or `(\w+)`", role.text)[0]:
        assert word in help_text, f"--log.format has no {word}"


def test_the_config_blocks_are_accepted_by_check_config(config: Walk, tmp_path: Path) -> None:
    checked = config.run(["lockwatch", "check-config", "lockwatch.yml"])
    assert checked.returncode == 0, checked.stderr
    # The fragments: a target's locks section, as the prose says they go.
    fragments = [body for body in config.blocks("yaml") if body.startswith("locks:")]
    for number, body in enumerate(fragments):
        target = {"name": "app", "dsn": "${APP_DSN}", **yaml.safe_load(body)}
        path = tmp_path / f"fragment-{number}.yml"
        path.write_text(yaml.safe_dump({"targets": [target]}))
        fragment = config.run(["lockwatch", "check-config", str(path)])
        assert fragment.returncode == 0, fragment.stderr
    for switch in re.findall(r"`(catalogue(?:_skip)?: [^`]+)`", config.text):
        path = tmp_path / "switch.yml"
        target = {"name": "app", "dsn": "${APP_DSN}", "locks": yaml.safe_load(switch)}
        path.write_text(yaml.safe_dump({"targets": [target]}))
        assert config.run(["lockwatch", "check-config", str(path)]).returncode == 0, switch
    exported = config.run(["lockwatch", "export", "config"])
    assert exported.stdout == (ROOT / "docs" / "lockwatch.example.yml").read_text()


def test_one_look_without_a_daemon_says_what_each_comment_promises(
    config: Walk, holders: Holders
) -> None:
    (block,) = [b for b in config.blocks("sh") if "snapshot" in b]
    worker = holders.worker.info.backend_pid
    for words in shell_commands(block):
        shown = config.run(words)
        command = shlex.join(words)
        assert shown.returncode in (0, 1), f"{command}: {shown.stderr}"
        if words[1] == "doctor":
            assert shown.returncode == 0, shown.stdout
            assert "SAFE for session state" in shown.stdout
            assert "orphan lifetime" in shown.stdout, "how long would an orphan live here?"
        elif "--json" in words:
            document = json.loads(shown.stdout)
            (target,) = document["targets"]
            assert "42" in {lock["key"] for lock in target["locks"]}, "the locks"
            # the findings; it exits 1 when it sees a problem, 0 when none
            assert shown.returncode == (1 if document["findings"] else 0)
        elif "-c" in words:
            assert "webhook-delivery (42)" in shown.stdout, "the config's names"
        else:
            assert f"pid {worker} webhook-worker-1" in shown.stdout, "one block per holding session"
            assert "waiting" in shown.stdout, "its waiters"
            assert "Prisma Migrate (72707369)" in shown.stdout, "named with no config"


def test_every_command_of_the_section_is_one_the_walk_knows(walk: Walk) -> None:
    """A command added to the section fails here until the walk is taught it."""
    commands = [words for body in walk.blocks("sh") for words in shell_commands(body)]
    what = [words[[w.startswith("lockwatch") for w in words].index(True) + 1] for words in commands]
    assert what == ["run", "snapshot", "snapshot", "snapshot", "doctor"]
    assert len(walk.blocks("sql")) == 1

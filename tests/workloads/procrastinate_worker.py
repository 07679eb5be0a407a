"""A procrastinate 3 worker as its users run one: its own process and
connection, a heartbeat every second (10 s by default), one task that never
returns ("hang"), so a test can kill it mid-job or hang it, and a report of
a second ("report") to keep it busy. Prints "started" once its
worker is registered and "running <job id>" when the job starts.

Usage: python procrastinate_worker.py <conninfo> <queue>
"""

from __future__ import annotations

import asyncio
import sys

import procrastinate


async def hang(context: procrastinate.JobContext) -> None:
    assert context.job is not None
    print(f"running {context.job.id}", flush=True)
    await asyncio.Event().wait()


async def report() -> None:
    await asyncio.sleep(1.0)


async def main(conninfo: str, queue: str) -> None:
    # The app is made here, not at import: pytest imports this module to
    # collect its doctests, with no server and no arguments.
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo))
    app.task(queue=queue, name="hang", pass_context=True)(hang)
    app.task(queue=queue, name="report")(report)
    async with app.open_async():
        print("started", flush=True)
        await app.run_worker_async(queues=[queue], update_heartbeat_interval=1.0, wait=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:3]))

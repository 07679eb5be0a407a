"""The other side of a procrastinate 3 deployment, as its users run it: a web
app that only enqueues (and the deploy step that applies the schema), in a
process of its own so that the release on its PYTHONPATH is the one used.
Prints "procrastinate <version>" first, then "deferred <job id>" per job.

Usage: python procrastinate_app.py <conninfo> schema
       python procrastinate_app.py <conninfo> defer <queue> <task> <count>
"""

from __future__ import annotations

import asyncio
import sys
from importlib.metadata import version

import procrastinate


async def main(conninfo: str, command: str, *args: str) -> None:
    print(f"procrastinate {version('procrastinate')}", flush=True)
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo))
    async with app.open_async():
        if command == "schema":
            await app.schema_manager.apply_schema_async()
            return
        queue, task, count = args
        # Only deferred here, by name: the workers have the code.
        deferrer = app.configure_task(name=task, queue=queue)
        for _ in range(int(count)):
            print(f"deferred {await deferrer.defer_async()}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))

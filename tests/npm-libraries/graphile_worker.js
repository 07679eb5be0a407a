// A graphile-worker runner as an application runs it: one task, a job
// added every 200 ms and run in 50 ms. Prints one line per job run.
// With "hang", one job is added and its task never returns, as a worker
// stuck mid-job that the test then kills. GRAPHILE_WORKER_PACKAGE names the
// release: graphile-worker (0.16, CommonJS) or graphile-worker-latest (ESM,
// Node.js 22), loaded from NODE_PATH as ESM does not search it.
// GRAPHILE_WORKER_CONCURRENCY: its workers (2 by default).
// Usage: node graphile_worker.js <connection string> <task> [hang]
const { join } = require("node:path");
const { pathToFileURL } = require("node:url");

const release = process.env.GRAPHILE_WORKER_PACKAGE || "graphile-worker";

const [connectionString, task, mode] = process.argv.slice(2);

async function main() {
  const { run } =
    release === "graphile-worker"
      ? require(release)
      : await import(pathToFileURL(join(process.env.NODE_PATH, release, "dist", "index.js")).href);
  const runner = await run({
    connectionString,
    concurrency: Number(process.env.GRAPHILE_WORKER_CONCURRENCY || 2),
    pollInterval: 200,
    noHandleSignals: true,
    crontab: "",
    taskList: {
      [task]: async (payload, helpers) => {
        if (mode === "hang") {
          console.log(`running ${helpers.job.id}`);
          await new Promise(() => {});
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
        console.log(`completed ${payload.n}`);
      },
    },
  });
  let n = 0;
  if (mode === "hang") {
    await runner.addJob(task, { n });
  } else {
    setInterval(() => runner.addJob(task, { n: n++ }), 200);
  }
  process.on("SIGTERM", async () => {
    // runner.stop() waits for the running jobs, which a hanging one never ends.
    if (mode !== "hang") await runner.stop();
    process.exit(0);
  });
  console.log("started");
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});

// A graphile-worker 0.16 runner as an application runs it: one task, a job
// added every 200 ms and run in 50 ms. Prints one line per job run.
// With "hang", one job is added and its task never returns, as a worker
// stuck mid-job that the test then kills.
// Usage: node graphile_worker.js <connection string> <task> [hang]
const { run } = require("graphile-worker");

const [connectionString, task, mode] = process.argv.slice(2);

async function main() {
  const runner = await run({
    connectionString,
    concurrency: 2,
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
    await runner.stop();
    process.exit(0);
  });
  console.log("started");
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});

// A pg-boss 10 worker as an application runs it: one queue, a job sent every
// 200 ms and worked in batches, maintenance every second. Prints one line per
// maintenance run and per completed job, so a test can wait for them.
// With "hang", one job is sent and its handler never returns, as a worker
// stuck mid-job that the test then kills.
// Usage: node pg_boss_worker.js <connection string> <queue> [hang]
const PgBoss = require("pg-boss");

const [connectionString, queue, mode] = process.argv.slice(2);
const boss = new PgBoss({
  connectionString,
  maintenanceIntervalSeconds: 1,
  monitorStateIntervalSeconds: 1,
});
boss.on("error", (error) => console.error(`error ${error.message}`));
boss.on("maintenance", () => console.log("maintenance"));

async function main() {
  await boss.start();
  await boss.createQueue(queue);
  if (mode === "hang") {
    await boss.work(queue, { pollingIntervalSeconds: 0.5 }, async ([job]) => {
      console.log(`running ${job.id}`);
      await new Promise(() => {});
    });
    await boss.send(queue, { hang: true });
    console.log("started");
    return;
  }
  // A batch per fetch, so the worker keeps up with five jobs a second.
  await boss.work(queue, { pollingIntervalSeconds: 0.5, batchSize: 10 }, async (jobs) => {
    await new Promise((resolve) => setTimeout(resolve, 50));
    for (const job of jobs) console.log(`completed ${job.id}`);
  });
  setInterval(() => boss.send(queue, { at: Date.now() }), 200);
  console.log("started");
}

process.on("SIGTERM", async () => {
  await boss.stop({ graceful: false, wait: false });
  process.exit(0);
});
main().catch((error) => {
  console.error(error);
  process.exit(1);
});

// A pg-boss 10 worker as an application runs it: one queue, a job sent every
// 200 ms and worked in batches, maintenance every second. Prints one line per
// maintenance run and per completed job, so a test can wait for them.
// With "hang", one job is sent and its handler never returns, as a worker
// stuck mid-job that the test then kills. With "slow", one job whose handler
// takes 20 s is sent with expireInSeconds 1: pg-boss gives up on the handler
// after a second (without stopping it) and runs the job again.
// Usage: node pg_boss_worker.js <connection string> <queue> [hang|slow]
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
  if (mode === "slow") {
    const options = { pollingIntervalSeconds: 0.5, includeMetadata: true };
    await boss.work(queue, options, async ([job]) => {
      console.log(`running ${job.id} ${job.retryCount}`);
      await new Promise((resolve) => setTimeout(resolve, 20000));
      console.log(`finished ${job.id} ${job.retryCount}`);
    });
    await boss.send(queue, {}, { expireInSeconds: 1, retryLimit: 10, retryDelay: 0 });
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

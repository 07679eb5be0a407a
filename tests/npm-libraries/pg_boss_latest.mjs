// pg-boss 12 (its latest release, ESM, Node.js 22) as its users run it.
// "worker": works the queue (a job in 50 ms) and sends nothing; with "hang",
// its handler never returns (as it never does for a job sent with {hang: true}).
// "producer": sends only, as a web app that enqueues does; with a count it
// sends that many jobs and keeps running; with "hang", one job that hangs.
// "worker slow": each handler runs until the file named by PGBOSS_RELEASE_FILE
// exists, past its job's expiry if need be (pg-boss fails the job and retries
// it elsewhere without stopping the handler), printing "running <id> <retry>"
// and "finished <id> <retry>"; "producer slow" sends one job that expires
// after 4 s and is retried once.
// Each process is its own pg-boss instance (a heartbeat every second here,
// or every PGBOSS_HEARTBEAT_SECONDS; 30 s by default). Prints "started", then "running <id>" and "completed <id>".
// Usage: node pg_boss_latest.mjs <connection string> <queue> worker|producer [hang|slow|<count>]
import { existsSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

// ESM resolves packages beside the script, not on NODE_PATH: load it from there.
const entry = join(process.env.NODE_PATH, "pg-boss-latest", "dist", "index.js");
const { PgBoss } = await import(pathToFileURL(entry).href);

const [connectionString, queue, role, mode] = process.argv.slice(2);
const instanceHeartbeatSeconds = Number(process.env.PGBOSS_HEARTBEAT_SECONDS || 1);
const boss = new PgBoss({ connectionString, instanceHeartbeatSeconds });
boss.on("error", (error) => console.log(`error ${error.message}`));

async function main() {
  await boss.start();
  await boss.createQueue(queue);
  if (role === "worker" && mode === "slow") {
    await boss.work(queue, { pollingIntervalSeconds: 0.5 }, async ([job]) => {
      console.log(`running ${job.id} ${job.retryCount}`);
      await new Promise((resolve) => {
        const check = setInterval(() => {
          if (!existsSync(process.env.PGBOSS_RELEASE_FILE)) return;
          clearInterval(check);
          resolve();
        }, 100);
      });
      console.log(`finished ${job.id} ${job.retryCount}`);
    });
  } else if (role === "worker") {
    await boss.work(queue, { pollingIntervalSeconds: 0.5 }, async ([job]) => {
      console.log(`running ${job.id}`);
      if (mode === "hang" || job.data?.hang) await new Promise(() => {});
      await new Promise((resolve) => setTimeout(resolve, 50));
      console.log(`completed ${job.id}`);
    });
  } else if (mode === "hang") {
    console.log(`sent ${await boss.send(queue, { hang: true })}`);
  } else if (mode === "slow") {
    const options = { expireInSeconds: 4, retryLimit: 1, retryDelay: 0 };
    console.log(`sent ${await boss.send(queue, {}, options)}`);
  } else {
    const count = Number(mode || 0);
    for (let n = 0; n < count; n++) console.log(`sent ${await boss.send(queue, { n })}`);
    if (!count) setInterval(() => boss.send(queue, { at: Date.now() }), 200);
  }
  console.log("started");
}

process.on("SIGTERM", async () => {
  await boss.stop({ graceful: false, wait: false });
  process.exit(0);
});
main().catch((error) => {
  console.log(`error ${error.stack}`);
  process.exit(1);
});

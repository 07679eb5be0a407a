// Seed 003 on a busy node-postgres pool (issue 18, part 3), driven by
// tests/integration/test_busy_pool_orphan.py over stdin and stdout.
//
// A pg.Pool of POOL_SIZE clients serves TRAFFIC concurrent loops of short
// queries, as a web app's requests. Each "lock" line on stdin takes the
// session lock (LOCK_KEY) with pool.query: the client that ran it goes back to
// the pool, lock and all, and is lent to the traffic. Each "unlock" line
// unlocks with pool.query too, which only works on the client holding it (on
// any other, PostgreSQL warns and says false), so it is tried until it lands
// there. Every event is one JSON line on stdout; the connection comes from the
// PG* environment variables, as node-postgres reads them.
"use strict";

const readline = require("node:readline");
const { Pool } = require("pg");

const POOL_SIZE = Number(process.env.POOL_SIZE || 3);
const TRAFFIC = Number(process.env.TRAFFIC || 4);
const [FIRST, SECOND] = (process.env.LOCK_KEY || "7,13").split(",").map(Number);

const pool = new Pool({ max: POOL_SIZE, idleTimeoutMillis: 0 });
let stopping = false;

function say(event, fields) {
  process.stdout.write(JSON.stringify({ event, ...fields }) + "\n");
}

async function traffic() {
  while (!stopping) {
    await pool.query("SELECT pg_sleep(0.005)");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

async function lock() {
  const { rows } = await pool.query(
    "SELECT pg_advisory_lock($1, $2), pg_backend_pid() AS pid, clock_timestamp() AS at",
    [FIRST, SECOND],
  );
  say("locked", { pid: rows[0].pid, at: rows[0].at.toISOString() });
}

async function unlock() {
  for (let tries = 1; ; tries += 1) {
    const { rows } = await pool.query(
      "SELECT pg_advisory_unlock($1, $2) AS ok, pg_backend_pid() AS pid, clock_timestamp() AS at",
      [FIRST, SECOND],
    );
    if (rows[0].ok) {
      say("unlocked", { pid: rows[0].pid, at: rows[0].at.toISOString(), tries });
      return;
    }
  }
}

async function main() {
  // Every client connected before the lock, so the pool has others to lend.
  const clients = await Promise.all(Array.from({ length: POOL_SIZE }, () => pool.connect()));
  clients.forEach((client) => client.release());
  const loops = Array.from({ length: TRAFFIC }, traffic);
  say("ready", { clients: pool.totalCount });
  for await (const line of readline.createInterface({ input: process.stdin })) {
    if (line === "lock") await lock();
    else if (line === "unlock") await unlock();
  }
  stopping = true;
  await Promise.all(loops);
  await pool.end();
  say("ended", {});
}

main().catch((error) => {
  process.stderr.write(`${error.stack || error}\n`);
  process.exit(1);
});

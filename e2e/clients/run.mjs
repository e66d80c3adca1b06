// Issue #38's yardstick: drives each third-party E2B client in this
// directory through its own public API against a running codecage
// (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY), prints one line per step and
// "N of M steps passed" per client. Every step needs only this host, so
// each must pass: the exit status is 1 when one failed (2: the harness
// itself broke).
// Usage: node run.mjs [client ...]   (default: every client)
import { Sandbox } from "e2b";
import * as openai from "./openai.mjs";
import * as mastra from "./mastra.mjs";
import * as computesdk from "./computesdk.mjs";
import * as cli from "./cli.mjs";

for (const v of ["E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY"]) {
  if (!process.env[v]) {
    console.error(`run.mjs: ${v} is not set`);
    process.exit(2);
  }
}

const CLIENTS = [openai, mastra, computesdk, cli];
// A step may name its own limit as a third element, { timeoutMs }.
const STEP_TIMEOUT_MS = 90_000;

// A client library may leave a promise rejected in the background after a
// step failed; that belongs to the step's finding, not to the harness.
process.on("unhandledRejection", (e) => {
  console.error(`  (unhandled rejection in a client: ${short(e)})`);
});

// short turns an error into the one-line reason a report can quote.
// A command error's stderr (E2B's CommandExitError, or one a client wraps
// as its cause) is the part that says why, so it is kept.
export function short(e) {
  let msg = e instanceof Error ? `${e.constructor?.name ?? "Error"}: ${e.message}` : String(e);
  for (let c = e, depth = 0; c && typeof c === "object" && depth < 4; c = c.cause, depth++) {
    const stderr = c.stderr ?? c.result?.stderr;
    if (typeof stderr === "string" && stderr.trim()) {
      msg += ` (stderr: ${stderr.trim()})`;
      break;
    }
    if (c !== e && c instanceof Error) msg += ` <- ${c.message}`;
  }
  const line = msg.replace(/\s+/g, " ").trim();
  return line.length > 220 ? line.slice(0, 217) + "..." : line;
}

async function listIds() {
  const ids = [];
  for (const state of ["running", "paused"]) {
    const pages = Sandbox.list({ query: { state: [state] } });
    while (pages.hasNext) for (const s of await pages.nextItems()) ids.push(s.sandboxId);
  }
  return ids;
}

async function runClient(client) {
  // ctx carries what one step leaves for the next (the sandbox, its id);
  // ctx.sandboxIds lists every sandbox made, for the cleanup.
  const ctx = { sandboxIds: new Set() };
  const before = new Set(await listIds());
  let passed = 0;
  for (const [step, fn, opts = {}] of client.steps) {
    const limit = opts.timeoutMs ?? STEP_TIMEOUT_MS;
    let timer;
    try {
      const observed = await Promise.race([
        fn(ctx),
        new Promise((_, reject) => {
          timer = setTimeout(() => reject(new Error(`step timed out after ${limit / 1000} s`)), limit);
        }),
      ]);
      passed++;
      console.log(`${client.name}\t${step}\tPASS${observed ? `\t${short(observed)}` : ""}`);
    } catch (e) {
      console.log(`${client.name}\t${step}\tFAIL\t${short(e)}`);
    } finally {
      clearTimeout(timer);
    }
  }
  // A client that fails half way may leave a sandbox it never handed back.
  for (const id of await listIds()) if (!before.has(id)) ctx.sandboxIds.add(id);
  for (const id of ctx.sandboxIds) {
    try {
      await Sandbox.kill(id);
    } catch {
      /* already gone */
    }
  }
  return [passed, client.steps.length];
}

const only = process.argv.slice(2);
const chosen = only.length ? CLIENTS.filter((c) => only.includes(c.name)) : CLIENTS;
if (only.length && chosen.length !== only.length) {
  console.error(`run.mjs: unknown client in ${only.join(" ")}; known: ${CLIENTS.map((c) => c.name).join(" ")}`);
  process.exit(2);
}
const summary = [];
for (const client of chosen) summary.push([client.name, ...(await runClient(client))]);
console.log("--- summary ---");
let allPassed = 0;
let all = 0;
for (const [name, passed, total] of summary) {
  console.log(`${name}: ${passed} of ${total} steps passed`);
  allPassed += passed;
  all += total;
}
console.log(`all clients: ${allPassed} of ${all} steps passed`);
process.exit(allPassed === all ? 0 : 1);

// Shared plumbing for the E2B suites in e2e/e2b/suites/: one check runner,
// one cleanup list, the environment they need. Each suite is a plain node
// program run by scripts/e2e-e2b.sh against a live `codecage serve`.
import assert from "node:assert/strict";
import { Sandbox } from "@e2b/code-interpreter";

for (const v of ["E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY", "CODECAGE_E2B_SECOND_KEY"]) {
  if (!process.env[v]) {
    console.error(`${process.argv[1]}: ${v} is not set`);
    process.exit(2);
  }
}

export const SANDBOX_URL = process.env.E2B_SANDBOX_URL.replace(/\/$/, "");
export const ALICE = process.env.E2B_API_KEY;
export const BOB = process.env.CODECAGE_E2B_SECOND_KEY;
const KEEP_GOING = process.env.E2E_KEEP_GOING === "1";
const CHECK_TIMEOUT_MS = 120_000;
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let passes = 0;
let failures = 0;
const made = []; // [sandbox, apiKey]

// create makes a code-interpreter sandbox that is killed when the suite ends.
export async function create(opts = {}) {
  const sbx = await Sandbox.create(opts);
  made.push([sbx, opts.apiKey ?? ALICE]);
  return sbx;
}

// track registers a sandbox made another way for the final cleanup.
export function track(sbx, apiKey = ALICE) {
  made.push([sbx, apiKey]);
  return sbx;
}

async function cleanup() {
  for (const [s, apiKey] of made) {
    try {
      await Sandbox.kill(s.sandboxId, { apiKey });
    } catch {
      /* already gone */
    }
  }
}

export function describe(e) {
  if (!(e instanceof Error)) return `not an error: ${JSON.stringify(e)?.slice(0, 400)}`;
  if (e instanceof assert.AssertionError) return e.message;
  return `${e.constructor?.name ?? e.name}: ${e.message}`;
}

// check runs fn; fn may return a string describing what was observed.
export async function check(name, fn) {
  let timer;
  try {
    const observed = await Promise.race([
      fn(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`check timed out after ${CHECK_TIMEOUT_MS} ms`)), CHECK_TIMEOUT_MS);
      }),
    ]);
    passes++;
    console.log(`ok ${name}${observed ? ` (${observed})` : ""}`);
  } catch (e) {
    failures++;
    console.log(`FAIL ${name}: ${describe(e)}`);
    if (e && e.stack && !(e instanceof assert.AssertionError)) console.log(e.stack.split("\n").slice(1, 4).join("\n"));
    if (!KEEP_GOING) {
      await cleanup();
      console.log(`\n${passes} passed, stopped at the first failure (set E2E_KEEP_GOING=1 to run every check)`);
      process.exit(1);
    }
  } finally {
    clearTimeout(timer);
  }
}

// rejects asserts that p rejects (optionally with an instance of cls) and
// returns the error's class name and message for printing.
export async function rejects(p, cls, what) {
  let err;
  try {
    const v = await p;
    assert.fail(`${what}: expected a rejection${cls ? ` with ${cls.name}` : ""}, got ${JSON.stringify(v)?.slice(0, 300)}`);
  } catch (e) {
    if (e instanceof assert.AssertionError) throw e;
    err = e;
  }
  if (cls) assert.ok(err instanceof cls, `${what}: expected ${cls.name}, got ${describe(err)}`);
  return `${err.constructor?.name ?? err.name}: ${String(err.message).slice(0, 160)}`;
}

// finish kills what the suite made and exits with its verdict.
export async function finish() {
  await cleanup();
  console.log(`\n${passes} passed, ${failures} failed`);
  process.exit(failures ? 1 : 0);
}

// startServe starts a codecage serve of a suite's own (bin/codecage, on
// free loopback ports, a state directory of its own, ALICE's key) with
// args and env added, and waits until its E2B listener answers. It
// returns the E2B URL, the last of its log, and stop (which removes its
// state); a serve that does not start ends the suite with its log.
export async function startServe(what, args = [], env = {}) {
  const { spawn } = await import("node:child_process");
  const { mkdtempSync, rmSync } = await import("node:fs");
  const net = await import("node:net");
  const { tmpdir } = await import("node:os");
  const { join } = await import("node:path");
  const { fileURLToPath } = await import("node:url");
  const freePort = () =>
    new Promise((resolve) => {
      const s = net.createServer();
      s.listen(0, "127.0.0.1", () => {
        const { port } = s.address();
        s.close(() => resolve(port));
      });
    });
  const restPort = await freePort();
  const e2bPort = await freePort();
  const state = mkdtempSync(join(tmpdir(), `codecage-e2e-${what}-`));
  const bin = fileURLToPath(new URL("../../bin/codecage", import.meta.url));
  const serve = spawn(
    bin,
    ["serve", "--listen", `127.0.0.1:${restPort}`, "--e2b-listen", `127.0.0.1:${e2bPort}`, "--state-dir", join(state, "state"), ...args],
    { env: { ...process.env, SANDBOX_API_KEYS: `alice:${ALICE}`, SANDBOX_RATE_LIMIT: "0", ...env }, stdio: ["ignore", "ignore", "pipe"] },
  );
  let log = "";
  serve.stderr.on("data", (c) => (log = (log + c).slice(-200_000)));
  const stop = async () => {
    serve.kill("SIGTERM");
    await new Promise((r) => (serve.exitCode !== null ? r() : serve.on("exit", r)));
    rmSync(state, { recursive: true, force: true });
  };
  for (let i = 0; ; i++) {
    const up = await new Promise((r) => {
      const c = net.connect(e2bPort, "127.0.0.1", () => (c.end(), r(true)));
      c.on("error", () => r(false));
    });
    if (up) break;
    if (i > 300 || serve.exitCode !== null) {
      console.log(`the ${what} server did not start; its log:\n${log}`);
      await stop();
      process.exit(1);
    }
    await sleep(100);
  }
  return { url: `http://127.0.0.1:${e2bPort}`, state, log: () => log, stop };
}

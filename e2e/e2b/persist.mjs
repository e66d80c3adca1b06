// End-to-end test of codecage's persistence through the OFFICIAL E2B JS SDK
// (e2b 2.51.0), used unchanged: pause, connect (resume), lifecycle
// onTimeout 'pause', snapshots, fork and the paused state in list and
// getInfo. Each check is one of E2B's own SDK tests (packages/js-sdk/tests/
// ...), named after it, with the same calls and assertions; the sandbox is
// E2B's test fixture, Sandbox.create('base').
//
// Env: as test.mjs (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY; optional
// E2E_KEEP_GOING=1). Prints "ok NAME" / "FAIL NAME: ..."; exits non-zero
// on failure.
import assert from "node:assert/strict";
import { Sandbox, SandboxNotFoundError } from "e2b";

for (const v of ["E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY"]) {
  if (!process.env[v]) {
    console.error(`persist.mjs: ${v} is not set`);
    process.exit(2);
  }
}
const KEEP_GOING = process.env.E2E_KEEP_GOING === "1";
const CHECK_TIMEOUT_MS = 120_000;
const RUN = `persist-${Date.now()}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let passes = 0;
let failures = 0;
const made = new Set(); // sandbox ids to kill at the end
const snapshots = new Set(); // snapshot ids to delete at the end

async function cleanup() {
  for (const id of made) await Sandbox.kill(id).catch(() => {});
  for (const id of snapshots) await Sandbox.deleteSnapshot(id).catch(() => {});
  made.clear();
  snapshots.clear();
}

function describe(e) {
  if (!(e instanceof Error)) return `not an error: ${JSON.stringify(e)?.slice(0, 400)}`;
  if (e instanceof assert.AssertionError) return e.message;
  return `${e.constructor?.name ?? e.name}: ${e.message}`;
}

async function check(name, fn) {
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
    await cleanup(); // as E2B's fixture: each test kills its sandboxes
  }
}

// E2B's fixture: a base sandbox tagged with this run, killed at the end.
async function create(opts = {}) {
  const s = await Sandbox.create("base", { ...opts, metadata: { run: RUN, ...(opts.metadata ?? {}) } });
  made.add(s.sandboxId);
  return s;
}

async function track(sbx) {
  made.add(sbx.sandboxId);
  return sbx;
}

// --- tests/api/snapshot.test.ts ----------------------------------------------
await check("api/snapshot: pause sandbox", async () => {
  const sbx = await create();
  await Sandbox.pause(sbx.sandboxId);
  assert.equal(await sbx.isRunning(), false);
});

await check("api/snapshot: resume sandbox (the old handle runs again)", async () => {
  const sbx = await create();
  await Sandbox.pause(sbx.sandboxId);
  assert.equal(await sbx.isRunning(), false);
  await Sandbox.connect(sbx.sandboxId);
  assert.equal(await sbx.isRunning(), true);
});

// --- tests/sandbox/snapshot.test.ts --------------------------------------------
await check("sandbox/snapshot: pause and resume a sandbox", async () => {
  const sbx = await create();
  assert.equal(await sbx.isRunning(), true);
  await sbx.pause();
  assert.equal(await sbx.isRunning(), false);
  const resumed = await Sandbox.connect(sbx.sandboxId);
  assert.equal(resumed.sandboxId, sbx.sandboxId);
  assert.equal(await resumed.isRunning(), true);
});

await check("sandbox/snapshot: pause and resume a sandbox with env vars", async () => {
  const sbx = await create({ envs: { TEST_VAR: "sfisback" } });
  const before = await sbx.commands.run('echo "$TEST_VAR"');
  assert.equal(before.stdout.trim(), "sfisback");
  await sbx.pause();
  assert.equal(await sbx.isRunning(), false);
  const resumed = await Sandbox.connect(sbx.sandboxId);
  const after = await resumed.commands.run('echo "$TEST_VAR"');
  assert.equal(after.stdout.trim(), "sfisback");
});

await check("sandbox/snapshot: pause and resume a sandbox with file", async () => {
  const sbx = await create();
  await sbx.files.write("test_snapshot.txt", "This is a snapshot test file.");
  await sbx.pause();
  assert.equal(await sbx.isRunning(), false);
  const resumed = await Sandbox.connect(sbx.sandboxId);
  assert.equal(await resumed.files.exists("test_snapshot.txt"), true);
  assert.equal(await resumed.files.read("test_snapshot.txt"), "This is a snapshot test file.");
});

// The two with a background process use python3's sleep: codecage's
// command allow-list has no sleep program.
await check("sandbox/snapshot: pause and resume a sandbox with ongoing long running process", async () => {
  const sbx = await create();
  const cmd = await sbx.commands.run('python3 -c "import time; time.sleep(3600)"', { background: true });
  const expectedPid = cmd.pid;
  await sbx.pause();
  assert.equal(await sbx.isRunning(), false);
  const resumed = await Sandbox.connect(sbx.sandboxId);
  const pids = (await resumed.commands.list()).map((c) => c.pid);
  assert.ok(pids.includes(expectedPid), `pid ${expectedPid} not in commands.list() after the resume: ${JSON.stringify(pids)}`);
  assert.equal(await resumed.commands.kill(expectedPid), true);
});

await check("sandbox/snapshot: pause and resume a sandbox with completed long running process", async () => {
  const sbx = await create();
  const filename = "test_long_running.txt";
  await sbx.commands.run(
    `python3 -c "import time; time.sleep(2); open('/home/user/${filename}', 'w').write('done\\n')"`,
    { background: true },
  );
  let names = (await sbx.files.list("/home/user")).map((f) => f.name);
  assert.ok(!names.includes(filename), `${filename} exists before the command could write it`);
  await sbx.pause();
  const resumed = await Sandbox.connect(sbx.sandboxId);
  await new Promise((r) => setTimeout(r, 5000));
  names = (await resumed.files.list("/home/user")).map((f) => f.name);
  assert.ok(names.includes(filename), `${filename} missing 5 s after the resume: ${JSON.stringify(names)}`);
  assert.equal(await resumed.files.read(`/home/user/${filename}`), "done\n");
});

// --- tests/sandbox/connect.test.ts -----------------------------------------------
await check("connect: connect", async () => {
  const sbx = await create({ timeoutMs: 10_000 });
  const same = await Sandbox.connect(sbx.sandboxId);
  assert.equal(await same.isRunning(), true);
});

await check("connect: connect resumes paused sandbox", async () => {
  const sbx = await create();
  await sbx.pause();
  assert.equal(await sbx.isRunning(), false);
  const resumed = await Sandbox.connect(sbx.sandboxId);
  assert.equal(await resumed.isRunning(), true);
});

await check("connect: connect to non-running sandbox", async () => {
  const sbx = await create();
  await sbx.kill();
  const e = await Sandbox.connect(sbx.sandboxId).catch((err) => err);
  assert.ok(e instanceof SandboxNotFoundError, `expected SandboxNotFoundError, got ${describe(e)}`);
  assert.equal(e.name, "SandboxNotFoundError");
});

await check("connect: connect does not shorten timeout on running sandbox", async () => {
  const sbx = await create({ timeoutMs: 300_000 });
  const before = await sbx.getInfo();
  await Sandbox.connect(sbx.sandboxId, { timeoutMs: 10_000 });
  const after = await sbx.getInfo();
  assert.equal(after.endAt.getTime(), before.endAt.getTime(), `endAt ${before.endAt.toISOString()} -> ${after.endAt.toISOString()}`);
});

await check("connect: connect extends timeout on running sandbox", async () => {
  const sbx = await create({ timeoutMs: 300_000 });
  const before = await sbx.getInfo();
  await Sandbox.connect(sbx.sandboxId, { timeoutMs: 600_000 });
  const after = await sbx.getInfo();
  assert.ok(after.endAt.getTime() > before.endAt.getTime(), `endAt ${before.endAt.toISOString()} -> ${after.endAt.toISOString()}`);
});

// --- tests/sandbox/pause.test.ts ----------------------------------------------------
await check("pause: pause() returns false when sandbox is already paused", async () => {
  const sbx = await create();
  assert.equal(await sbx.pause(), true);
  assert.equal(await sbx.pause(), false);
});

await check("pause: pause() works on connected sandbox with apiKey in connectionConfig", async () => {
  const sbx = await create();
  const connected = await Sandbox.connect(sbx.sandboxId, { apiKey: process.env.E2B_API_KEY });
  assert.equal(await connected.pause(), true);
  assert.equal(await connected.isRunning(), false);
});

await check("pause: pause() uses apiKey from connectionConfig when E2B_API_KEY is not set", async () => {
  const apiKey = process.env.E2B_API_KEY;
  const sbx = await create();
  delete process.env.E2B_API_KEY;
  try {
    const connected = await Sandbox.connect(sbx.sandboxId, { apiKey });
    assert.equal(await connected.pause(), true);
    assert.equal(await connected.isRunning(), false);
  } finally {
    process.env.E2B_API_KEY = apiKey;
  }
});

// E2B's test also reads /proc/sys/kernel/random/boot_id to see a reboot;
// a codecage sandbox has no kernel of its own to boot, so only the files
// are checked.
await check("sandbox/snapshot: filesystem-only pause keeps the filesystem (without the boot_id check)", async () => {
  const sbx = await create();
  await sbx.files.write("/home/user/fs-only.txt", "survives");
  assert.equal(await sbx.pause({ keepMemory: false }), true);
  assert.equal(await sbx.isRunning(), false);
  await sbx.connect();
  assert.equal(await sbx.isRunning(), true);
  assert.equal(await sbx.files.read("/home/user/fs-only.txt"), "survives");
});

// --- tests/sandbox/snapshot-api.test.ts ----------------------------------------------
async function snap(sbx, opts) {
  const s = await sbx.createSnapshot(opts);
  snapshots.add(s.snapshotId);
  return s;
}

await check("snapshot-api: create a snapshot from sandbox", async () => {
  const sbx = await create();
  const s = await snap(sbx);
  assert.equal(typeof s.snapshotId, "string");
  assert.ok(s.snapshotId.length > 0);
  return s.snapshotId;
});

await check("snapshot-api: create sandbox from snapshot", async () => {
  const sbx = await create();
  await sbx.files.write("/home/user/test.txt", "snapshot content");
  const s = await snap(sbx);
  const from = await track(await Sandbox.create(s.snapshotId, { metadata: { run: RUN } }));
  assert.equal(await from.files.read("/home/user/test.txt"), "snapshot content");
});

await check("snapshot-api: create multiple sandboxes from same snapshot", async () => {
  const sbx = await create();
  await sbx.files.write("/home/user/test.txt", "shared content");
  const s = await snap(sbx);
  const one = await track(await Sandbox.create(s.snapshotId, { metadata: { run: RUN } }));
  const two = await track(await Sandbox.create(s.snapshotId, { metadata: { run: RUN } }));
  assert.equal(await one.files.read("/home/user/test.txt"), "shared content");
  assert.equal(await two.files.read("/home/user/test.txt"), "shared content");
  await one.files.write("/home/user/test.txt", "modified in sandbox1");
  assert.equal(await two.files.read("/home/user/test.txt"), "shared content");
});

await check("snapshot-api: list snapshots", async () => {
  const sbx = await create();
  const s = await snap(sbx);
  const pager = Sandbox.listSnapshots();
  assert.equal(pager.hasNext, true);
  const items = await pager.nextItems();
  assert.ok(items.some((x) => x.snapshotId === s.snapshotId), JSON.stringify(items));
});

await check("snapshot-api: list snapshots for specific sandbox", async () => {
  const sbx = await create();
  const s = await snap(sbx);
  const items = await sbx.listSnapshots().nextItems();
  assert.ok(items.some((x) => x.snapshotId === s.snapshotId), JSON.stringify(items));
  assert.ok(items.length >= 1);
});

const snapName = `snap-${RUN}`;
await check("snapshot-api: create a named snapshot", async () => {
  const sbx = await create();
  const s = await snap(sbx, { name: snapName });
  assert.ok(s.names.length > 0, JSON.stringify(s));
  assert.ok(s.names.some((n) => n.includes(snapName)), JSON.stringify(s));
});

await check("snapshot-api: list snapshots filtered by name", async () => {
  const sbx = await create();
  await snap(sbx, { name: snapName });
  const items = await Sandbox.listSnapshots({ name: snapName }).nextItems();
  assert.equal(items.length, 1, JSON.stringify(items));
  assert.ok(items[0].names.some((n) => n.includes(snapName)));
  const none = await Sandbox.listSnapshots({ name: `${snapName}-does-not-exist` }).nextItems();
  assert.deepEqual(none, []);
});

await check("snapshot-api: delete snapshot", async () => {
  const sbx = await create();
  const s = await snap(sbx);
  assert.equal(await Sandbox.deleteSnapshot(s.snapshotId), true);
  assert.equal(await Sandbox.deleteSnapshot(s.snapshotId), false);
  snapshots.delete(s.snapshotId);
});

await check("snapshot-api: snapshot preserves file system state", async () => {
  const sbx = await create();
  await sbx.files.makeDir("/home/user/testdir");
  await sbx.files.write("/home/user/testdir/file1.txt", "content1");
  await sbx.files.write("/home/user/testdir/file2.txt", "content2");
  const s = await snap(sbx);
  const from = await track(await Sandbox.create(s.snapshotId, { metadata: { run: RUN } }));
  assert.equal(await from.files.read("/home/user/testdir/file1.txt"), "content1");
  assert.equal(await from.files.read("/home/user/testdir/file2.txt"), "content2");
});

// --- tests/sandbox/fork.test.ts ----------------------------------------------------------
await check("fork: fork a sandbox", async () => {
  const sbx = await create();
  await sbx.files.write("/home/user/state.txt", "original state");
  const forks = await sbx.fork();
  assert.equal(forks.length, 1);
  const [fork] = forks;
  assert.ok(fork instanceof Sandbox, `not a Sandbox: ${describe(fork)}`);
  await track(fork);
  assert.notEqual(fork.sandboxId, sbx.sandboxId);
  assert.equal(await sbx.isRunning(), true);
  assert.equal(await fork.isRunning(), true);
  assert.equal(await fork.files.read("/home/user/state.txt"), "original state");
  await fork.files.write("/home/user/state.txt", "forked state");
  assert.equal(await sbx.files.read("/home/user/state.txt"), "original state");
});

await check("fork: fork a sandbox multiple times", async () => {
  const sbx = await create();
  const forks = await sbx.fork({ count: 2, timeoutMs: 60_000 });
  assert.equal(forks.length, 2);
  for (const f of forks) {
    assert.ok(f instanceof Sandbox, `not a Sandbox: ${describe(f)}`);
    await track(f);
  }
  assert.notEqual(forks[0].sandboxId, forks[1].sandboxId);
  assert.ok(!forks.some((f) => f.sandboxId === sbx.sandboxId));
  for (const f of forks) assert.equal(await f.isRunning(), true);
});

await check("fork: fork a sandbox by ID with the static method", async () => {
  const sbx = await create();
  const forks = await Sandbox.fork(sbx.sandboxId);
  assert.equal(forks.length, 1);
  assert.ok(forks[0] instanceof Sandbox, `not a Sandbox: ${describe(forks[0])}`);
  await track(forks[0]);
  assert.equal(await forks[0].isRunning(), true);
});

await check("fork: fork a killed sandbox fails", async () => {
  const sbx = await create();
  await sbx.kill();
  const e = await Sandbox.fork(sbx.sandboxId).catch((err) => err);
  assert.ok(e instanceof SandboxNotFoundError, `expected SandboxNotFoundError, got ${describe(e)}`);
});

// --- tests/sandbox/lifecyclePayload.test.ts ------------------------------------------------
await check("lifecycle: auto-pause without auto-resume requires connect to wake", async () => {
  const sbx = await create({ timeoutMs: 3_000, lifecycle: { onTimeout: "pause", autoResume: false } });
  await sleep(5_000);
  const info = await sbx.getInfo();
  assert.equal(info.state, "paused");
  assert.deepEqual(info.lifecycle, { onTimeout: "pause", autoResume: false });
  assert.equal(await sbx.isRunning(), false);
  await sbx.connect();
  assert.equal((await sbx.getInfo()).state, "running");
  assert.equal(await sbx.isRunning(), true);
});

await check("lifecycle: a timeout pause without memory keeps the files, not the processes", async () => {
  const sbx = await create({ timeoutMs: 3_000, lifecycle: { onTimeout: { action: "pause", keepMemory: false }, autoResume: false } });
  await sbx.files.write("/home/user/kept.txt", "on disk");
  const bg = await sbx.commands.run("sleep 600", { background: true });
  await sleep(5_000);
  const info = await sbx.getInfo();
  assert.equal(info.state, "paused");
  assert.deepEqual(info.lifecycle, { onTimeout: "pause", autoResume: false });
  await sbx.connect();
  assert.equal(await sbx.files.read("/home/user/kept.txt"), "on disk");
  const pids = (await sbx.commands.list()).map((p) => p.pid);
  assert.ok(!pids.includes(bg.pid), `the background command survived a pause without memory: ${pids}`);
});

// --- tests/api/list.test.ts -------------------------------------------------------------------
async function listAll(opts) {
  const out = [];
  const pager = Sandbox.list(opts);
  while (pager.hasNext) out.push(...(await pager.nextItems()));
  return out;
}

for (const [name, pause] of [
  ["list paused sandboxes (instance betaPause)", (s) => s.betaPause()],
  ["list paused sandboxes (static betaPause)", (s) => Sandbox.betaPause(s.sandboxId)],
]) {
  await check(`list: ${name}`, async () => {
    const tag = `${RUN}-${Math.random()}`;
    const sbx = await create({ metadata: { sandboxType: tag } });
    await pause(sbx);
    const items = await listAll({ query: { state: ["paused"], metadata: { sandboxType: tag } } });
    const found = items.find((s) => s.sandboxId === sbx.sandboxId);
    assert.ok(found, JSON.stringify(items));
    assert.equal(found.state, "paused");
  });
}

await check("list: paginate paused sandboxes", async () => {
  const tag = `${RUN}-${Math.random()}`;
  const first = await create({ metadata: { sandboxType: tag } });
  await first.betaPause();
  const second = await create({ metadata: { sandboxType: tag } });
  await second.betaPause();
  const pager = Sandbox.list({ limit: 1, query: { state: ["paused"], metadata: { sandboxType: tag } } });
  const page1 = await pager.nextItems();
  assert.equal(page1.length, 1);
  assert.equal(page1[0].state, "paused");
  assert.equal(pager.hasNext, true);
  assert.equal(page1[0].sandboxId, second.sandboxId, "page 1 is not the newer sandbox");
  const page2 = await pager.nextItems();
  assert.equal(page2.length, 1);
  assert.equal(page2[0].sandboxId, first.sandboxId);
  assert.equal(pager.hasNext, false);
});

await check("list: paginate running and paused sandboxes", async () => {
  const tag = `${RUN}-${Math.random()}`;
  const running = await create({ metadata: { sandboxType: tag } });
  const paused = await create({ metadata: { sandboxType: tag } });
  await paused.betaPause();
  const pager = Sandbox.list({ limit: 1, query: { state: ["running", "paused"], metadata: { sandboxType: tag } } });
  const page1 = await pager.nextItems();
  assert.equal(page1.length, 1);
  assert.equal(page1[0].sandboxId, paused.sandboxId);
  assert.equal(page1[0].state, "paused");
  assert.equal(pager.hasNext, true);
  const page2 = await pager.nextItems();
  assert.equal(page2.length, 1);
  assert.equal(page2[0].sandboxId, running.sandboxId);
  assert.equal(page2[0].state, "running");
  assert.equal(pager.hasNext, false);
});

await cleanup();
console.log(`\n${passes} passed, ${failures} failed`);
process.exit(failures ? 1 : 0);

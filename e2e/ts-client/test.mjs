// End-to-end test of codecage with the official MCP TypeScript client, over
// stdio (`codecage mcp`) and streamable HTTP (`codecage serve`).
// Usage: node test.mjs <path to codecage> <http url or "">
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [binary, httpURL] = process.argv.slice(2);
let failures = 0;
let passes = 0;

async function check(name, fn) {
  try {
    await fn();
    passes++;
    console.log(`ok ${name}`);
  } catch (e) {
    failures++;
    console.log(`FAIL ${name}: ${e.stack || e}`);
  }
}

function text(result) {
  return result.content.filter((c) => c.type === "text").map((c) => c.text).join("");
}

// ok calls a tool, checks that it succeeded and returns its structured result.
async function ok(client, name, args) {
  const r = await client.callTool({ name, arguments: args });
  assert.equal(r.isError ?? false, false, `${name}: ${text(r)}`);
  assert.ok(r.structuredContent, `${name} has no structured result: ${text(r)}`);
  return r.structuredContent;
}

// run executes code in a session, checks that it succeeded and returns its stdout.
async function run(client, id, code) {
  const m = await ok(client, "execute_code", { session_id: id, code });
  assert.equal(m.success, true, `${code}: ${JSON.stringify(m)}`);
  return m.stdout;
}

// The persistence tools (issue #26): pause and resume, snapshots, forks.
// Every session opened is closed, whatever fails.
async function persistence(label, client) {
  const opened = [];
  const create = async (args) => {
    const s = await ok(client, "create_session", args);
    assert.ok(s.session_id, JSON.stringify(s));
    opened.push(s.session_id);
    return s.session_id;
  };
  const closeAll = async () => {
    for (const id of opened.splice(0)) {
      const r = await client.callTool({ name: "close_session", arguments: { session_id: id } });
      assert.equal(r.isError ?? false, false, `close_session ${id}: ${text(r)}`);
    }
  };
  await check(`${label}: pause_session and resume_session keep the variables`, async () => {
    try {
      const id = await create({});
      await run(client, id, "x = 41\nopen('kept.txt', 'w').write('kept')");
      const p = await ok(client, "pause_session", { session_id: id });
      assert.equal(p.state, "paused", JSON.stringify(p));
      assert.equal(p.session_id, id);
      const again = await client.callTool({ name: "pause_session", arguments: { session_id: id } });
      assert.equal(again.isError, true, text(again));
      assert.match(text(again), /session paused/);
      const r = await ok(client, "resume_session", { session_id: id });
      assert.equal(r.state, "running", JSON.stringify(r));
      assert.equal(await run(client, id, "print(x + 1, open('kept.txt').read())"), "42 kept\n");
    } finally {
      await closeAll();
    }
  });
  await check(`${label}: snapshots, sessions from them, forks`, async () => {
    try {
      const id = await create({});
      await run(client, id, "x = 41\nopen('f.txt', 'w').write('parent')");
      const snap = await ok(client, "snapshot_session", { session_id: id, name: "e2e-ts" });
      const sid = snap.snapshot_id;
      assert.ok(sid, JSON.stringify(snap));
      assert.equal(snap.session_id, id);
      assert.equal(snap.name, "e2e-ts");

      const fid = await create({ from_snapshot: sid });
      assert.notEqual(fid, id);
      assert.equal(await run(client, fid, "print(x + 1, open('f.txt').read())"), "42 parent\n");
      await run(client, fid, "x = 'copy'\nopen('f.txt', 'w').write('copy')");
      assert.equal(await run(client, id, "print(x, open('f.txt').read())"), "41 parent\n");

      const fork = await ok(client, "fork_session", { session_id: id, count: 2 });
      assert.equal(fork.sessions.length, 2, JSON.stringify(fork));
      const copies = fork.sessions.map((c) => c.session?.session_id);
      for (const cid of copies) {
        assert.ok(cid, JSON.stringify(fork));
        opened.push(cid);
      }
      assert.equal(new Set([id, fid, ...copies]).size, 4, `copies are not new sessions: ${copies}`);
      for (const [i, cid] of copies.entries()) {
        assert.equal(await run(client, cid, `x = x + ${i + 1}\nprint(x, open('f.txt').read())`), `${42 + i} parent\n`);
      }
      assert.equal(await run(client, id, "print(x)"), "41\n");

      const listed = await ok(client, "list_snapshots", {});
      assert.ok(listed.snapshots.some((s) => s.snapshot_id === sid && s.name === "e2e-ts"), JSON.stringify(listed));
      const del = await ok(client, "delete_snapshot", { snapshot_id: sid });
      assert.equal(del.done, true, JSON.stringify(del));
      const after = await ok(client, "list_snapshots", {});
      assert.ok(Array.isArray(after.snapshots), JSON.stringify(after));
      assert.ok(!after.snapshots.some((s) => s.snapshot_id === sid), JSON.stringify(after));
    } finally {
      await closeAll();
    }
  });
}

async function suite(label, makeTransport, { persist = false } = {}) {
  const client = new Client({ name: "codecage-e2e", version: "1.0.0" });
  await client.connect(makeTransport());
  await check(`${label}: list tools`, async () => {
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name);
    for (const n of ["execute_code", "validate_code", "get_sandbox_info", "create_session", "write_file", "read_file", "list_files",
      "pause_session", "resume_session", "snapshot_session", "fork_session", "list_snapshots", "delete_snapshot"]) {
      assert.ok(names.includes(n), `missing ${n}`);
    }
    const exec = tools.find((t) => t.name === "execute_code");
    assert.ok(exec.inputSchema.properties.code, "execute_code has no code parameter");
    assert.ok(exec.outputSchema, "execute_code has no output schema");
  });
  await check(`${label}: print(6*7)`, async () => {
    const r = await client.callTool({ name: "execute_code", arguments: { code: "print(6*7)" } });
    assert.equal(r.isError ?? false, false);
    assert.equal(text(r), "42\n");
    assert.equal(r.structuredContent.stdout, "42\n");
    assert.equal(r.structuredContent.success, true);
  });
  await check(`${label}: a plot comes back as an image`, async () => {
    const r = await client.callTool({
      name: "execute_code",
      arguments: { code: "import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])", profile: "data_science" },
    });
    const images = r.content.filter((c) => c.type === "image");
    assert.equal(images.length, 1, text(r));
    assert.equal(images[0].mimeType, "image/png");
    assert.equal(Buffer.from(images[0].data, "base64").subarray(1, 4).toString(), "PNG");
  });
  await check(`${label}: a session across three calls`, async () => {
    const s = await client.callTool({ name: "create_session", arguments: {} });
    const id = s.structuredContent.session_id;
    assert.ok(id, text(s));
    await client.callTool({ name: "execute_code", arguments: { session_id: id, code: "acc = []" } });
    await client.callTool({ name: "execute_code", arguments: { session_id: id, code: "acc.append(6)\nacc.append(7)" } });
    const r = await client.callTool({ name: "execute_code", arguments: { session_id: id, code: "acc[0] * acc[1]" } });
    assert.equal(r.structuredContent.result, 42, text(r));
    await client.callTool({ name: "close_session", arguments: { session_id: id } });
  });
  await check(`${label}: a failed run is a tool error`, async () => {
    const r = await client.callTool({ name: "execute_code", arguments: { code: "1/0" } });
    assert.equal(r.isError, true);
    assert.match(text(r), /ZeroDivisionError/);
  });
  await check(`${label}: cancelling a long run`, async () => {
    const controller = new AbortController();
    const started = Date.now();
    const call = client.callTool(
      { name: "execute_code", arguments: { code: "import time\ntime.sleep(60)", timeout: 60 } },
      undefined,
      { signal: controller.signal, timeout: 120000 },
    );
    setTimeout(() => controller.abort(), 500);
    await assert.rejects(call);
    assert.ok(Date.now() - started < 10000, "cancellation took too long");
    // The server still serves right after.
    const r = await client.callTool({ name: "execute_code", arguments: { code: "print('after')" } });
    assert.equal(text(r), "after\n");
  });
  if (persist) {
    await persistence(label, client);
  }
  await client.close();
}

await suite("stdio", () => new StdioClientTransport({
  command: binary,
  args: ["mcp", "--enable-data-science", "true", "--pool-size", "1", "--data-science-pool-size", "1"],
  stderr: "ignore",
}));
if (httpURL) {
  // The persistence tools run over HTTP, against the served state directory.
  await suite("http", () => new StreamableHTTPClientTransport(new URL(httpURL)), { persist: true });
}
console.log(`${passes} passed, ${failures} failed`);
process.exit(failures ? 1 : 0);

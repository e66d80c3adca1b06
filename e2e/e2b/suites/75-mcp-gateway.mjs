// E2B's MCP gateway, as the SDK drives it (Sandbox.create({mcp}),
// getMcpUrl, getMcpToken) with the official MCP TypeScript SDK as the
// agent's client. codecage serves the gateway from outside the sandbox:
// the server the creator names is the operator's (SANDBOX_TOOLS_CONFIG,
// with a gateway block), started for that sandbox alone with the
// creator's token, and the sandbox never holds that token. That server is
// gateway-upstream.mjs; the codecage serve is a second one started here
// (the suites' own has no gateway servers).
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { fileURLToPath } from "node:url";
import { Sandbox } from "e2b";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { check, finish, rejects, startServe } from "../lib.mjs";

const state = mkdtempSync(join(tmpdir(), "codecage-e2e-gateway-"));
const upstreamLog = join(state, "upstream.log");
const toolsConfig = join(state, "tools.json");
writeFileSync(
  toolsConfig,
  JSON.stringify({
    servers: {
      canary: {
        command: process.execPath,
        args: [fileURLToPath(new URL("../gateway-upstream.mjs", import.meta.url))],
        env: { UPSTREAM_LOG: upstreamLog },
        gateway: { secrets: { token: { env: "CANARY_TOKEN" } } },
      },
    },
  }),
);
const served = await startServe("gateway", [], { SANDBOX_TOOLS_CONFIG: toolsConfig });
const url = served.url;
const stop = async () => {
  await served.stop();
  rmSync(state, { recursive: true, force: true });
};
const opts = { apiUrl: url, sandboxUrl: url, timeoutMs: 120_000 };

// loopbackFetch is fetch over node:http with every name looked up as
// 127.0.0.1 (node does not resolve *.localhost), the sandbox's port name
// kept as the Host; getMcpUrl's https is the scheme of E2B's cloud.
function loopbackFetch(input, init = {}) {
  const u = new URL(String(input).replace(/^https:/, "http:"));
  const headers = Object.fromEntries(new Headers(init.headers ?? {}).entries());
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        hostname: u.hostname,
        port: u.port || 80,
        path: u.pathname + u.search,
        method: init.method ?? "GET",
        headers,
        lookup: (_n, o, cb) => (o && o.all ? cb(null, [{ address: "127.0.0.1", family: 4 }]) : cb(null, "127.0.0.1", 4)),
      },
      (res) => {
        const h = new Headers();
        for (const [k, v] of Object.entries(res.headers)) h.set(k, Array.isArray(v) ? v.join(", ") : String(v));
        const empty = [204, 205, 304].includes(res.statusCode);
        resolve(new Response(empty ? null : Readable.toWeb(res), { status: res.statusCode, headers: h }));
      },
    );
    req.on("error", reject);
    init.signal?.addEventListener("abort", () => req.destroy(new Error("aborted")));
    req.end(init.body ?? undefined);
  });
}

async function mcpClient(mcpUrl, token) {
  const client = new Client({ name: "agent", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(mcpUrl.replace(/^https:/, "http:")), {
    fetch: loopbackFetch,
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  return client;
}

const canary = `canary-${Date.now()}-${Math.random().toString(36).slice(2)}`;

await check("create refuses an MCP server the operator does not allow, naming it", async () => {
  const got = await rejects(Sandbox.create({ ...opts, mcp: { github: { githubPersonalAccessToken: "ghp_x" } } }), Error, "github");
  assert.ok(got.includes("github") && !got.includes("ghp_x"), got);
  return got.slice(0, 160);
});

let sbx;
await check("Sandbox.create({mcp}): a real MCP client calls the operator's server through getMcpUrl", async () => {
  sbx = await Sandbox.create({ ...opts, mcp: { canary: { token: canary } } }); // ended with its server
  const mcpUrl = sbx.getMcpUrl();
  assert.match(mcpUrl, /^https:\/\/50005-.+\/mcp$/);
  const token = await sbx.getMcpToken();
  const client = await mcpClient(mcpUrl, token);
  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((t) => t.name), ["whoami"]);
  const r = await client.callTool({ name: "whoami", arguments: { name: "agent" } });
  assert.equal(r.content[0].text, `hello agent from upstream (token ${canary.length} bytes)`);
  await client.close();
  assert.ok(readFileSync(upstreamLog, "utf8").includes(canary), "the upstream was not started with the canary");
  return `${mcpUrl.replace(/\/\/.*?\./, "//50005-….")}: ${r.content[0].text}`;
});

await check("getMcpToken after a connect reads the token; a wrong one is refused", async () => {
  const again = await Sandbox.connect(sbx.sandboxId, opts);
  const token = await again.getMcpToken();
  assert.equal(token, await sbx.getMcpToken());
  await rejects(mcpClient(sbx.getMcpUrl(), "not-the-token-0000000000"), Error, "a wrong token");
});

// search counts, inside the sandbox as each of its users (a process's
// environment is its owner's to read), the files under its writable trees
// and the processes' environments and command lines that hold secret; it
// is given in two pieces, and to grep on a descriptor, so that no process
// of the search holds it whole.
async function search(secret) {
  const a = await searchAs(secret, "root");
  const b = await searchAs(secret, "user");
  return { files: a.files + b.files, procs: a.procs + b.procs };
}

async function searchAs(secret, user) {
  const [a, b] = [secret.slice(0, 8), secret.slice(8)];
  const r = await sbx.commands.run(
    `c="${a}""${b}"; grep -rlF -f <(printf %s "$c") /home /tmp /etc /root /var /opt 2>/dev/null | wc -l; ` +
      `for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ 2>/dev/null; tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -cF -f <(printf %s "$c") || true`,
    { user },
  );
  const [files, procs] = r.stdout.trim().split("\n").map(Number);
  return { files, procs };
}

await check("the canary is nowhere in the sandbox (its files, its processes) nor in codecage's log", async () => {
  // The search finds what is there: a control string in a process's
  // environment and in a file.
  const control = `control-${Math.random().toString(36).slice(2)}`;
  const [a, b] = [control.slice(0, 8), control.slice(8)];
  await sbx.commands.run(`export CONTROL="${a}""${b}"; (sleep 60 &) ; printf %s "$CONTROL" > /tmp/control`);
  const seen = await search(control);
  assert.ok(seen.files >= 1 && seen.procs >= 1, `the control was not found: ${JSON.stringify(seen)}`);
  const found = await search(canary);
  assert.deepEqual(found, { files: 0, procs: 0 }, `the canary: ${JSON.stringify(found)}`);
  assert.ok(!served.log().includes(canary), "codecage's own log has the canary");
  return `control found ${JSON.stringify(seen)}, canary ${JSON.stringify(found)}`;
});

await sbx?.kill().catch(() => {});
await stop();
await finish();

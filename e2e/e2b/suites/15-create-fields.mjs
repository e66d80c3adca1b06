// Create fields, as the SDK sends them: the ones codecage cannot honour
// (volumes, MCP, a host mask) are refused with 400 naming the field, never
// dropped, and so is an allowOut where the server gives no network. On a
// server whose operator enabled the network profile, allowInternetAccess
// false or a denyOut of ALL_TRAFFIC gives a sandbox no network, and
// allowOut, denyOut and updateNetwork narrow the operator's list while it
// runs. That server is a second codecage serve started here (the suites'
// own has no network profile), with a loopback HTTP server on its allow
// list whose connections are counted on the host.
import assert from "node:assert/strict";
import http from "node:http";
import { ALL_TRAFFIC, SandboxError } from "e2b";
import { check, create, finish, rejects, startServe } from "../lib.mjs";
import { Sandbox } from "@e2b/code-interpreter";

await check("create refuses the fields it cannot honour, naming each", async () => {
  const seen = [];
  for (const [opts, names] of [
    [{ volumeMounts: { "/mnt/vol": "vol" } }, "volumeMounts"],
    [{ mcp: { exa: { apiKey: "k" } } }, "mcp"],
    [{ network: { allowOut: ["1.1.1.1"] } }, "SANDBOX_ENABLE_NETWORK"],
    [{ allowInternetAccess: false, network: { allowOut: ["example.com"] } }, "SANDBOX_ENABLE_NETWORK"],
    [{ network: { maskRequestHost: "localhost:${PORT}" } }, "network.maskRequestHost"],
  ]) {
    const got = await rejects(create({ ...opts, timeoutMs: 60_000 }), SandboxError, JSON.stringify(opts));
    assert.match(got, /400/, `${JSON.stringify(opts)}: ${got}`);
    assert.ok(got.includes(names), `${JSON.stringify(opts)}: ${got} does not name ${names}`);
    seen.push(names);
  }
  return seen.join(", ");
});

await check("a partial denyOut is honoured where no sandbox has network", async () => {
  const sbx = await create({ timeoutMs: 60_000, network: { denyOut: ["8.8.8.8"] } });
  const r = await sbx.runCode("1 + 1");
  assert.equal(r.text, "2");
});

// The loopback server the network profile may reach; it counts what
// connects to it.
let conns = 0;
const target = http.createServer((_req, res) => res.end("hello from the host"));
target.on("connection", () => conns++);
await new Promise((r) => target.listen(0, "127.0.0.1", r));
const targetAddr = `127.0.0.1:${target.address().port}`;

const served = await startServe("net", ["--enable-network", "true", "--network-allow", targetAddr]);
const url = served.url;
const stop = async () => {
  await served.stop();
  target.close();
};
const netOpts = { apiUrl: url, sandboxUrl: url, timeoutMs: 120_000 };
const fetchCode = `import urllib.request\nurllib.request.urlopen("http://${targetAddr}/x", timeout=5).read().decode()`;

let proxy = "";
await check("a sandbox created without a deny reaches the allow-listed host", async () => {
  const sbx = await Sandbox.create(netOpts); // ended with its server
  const before = conns;
  const r = await sbx.runCode(fetchCode);
  assert.equal(r.error, undefined, JSON.stringify(r.error));
  assert.equal(r.text, "hello from the host");
  assert.ok(conns > before, `the host saw ${conns - before} connections`);
  proxy = (await sbx.runCode(`import urllib.request\nurllib.request.getproxies()["http"]`)).text;
  assert.match(proxy, /^http:\/\/127\.0\.0\.1:\d+$/);
  return `via ${proxy}`;
});

// A command tries the host directly and through the proxy's address.
const tryCommand = () => `python3 -c '
import urllib.request as u
for p in [{}, {"http": "${proxy}"}]:
    try:
        print(u.build_opener(u.ProxyHandler(p)).open("http://${targetAddr}/x", timeout=5).read().decode())
    except OSError as e:
        print("failed:", e)
'`;

for (const [what, opts] of [
  ["allowInternetAccess: false", { allowInternetAccess: false }],
  ["network.denyOut: [ALL_TRAFFIC]", { network: { denyOut: [ALL_TRAFFIC] } }],
]) {
  await check(`a sandbox created with ${what} reaches nothing`, async () => {
    const sbx = await Sandbox.create({ ...netOpts, ...opts });
    const before = conns;
    const r = await sbx.runCode(fetchCode);
    assert.notEqual(r.text, "hello from the host");
    assert.ok(r.error, "the run should fail");
    const c = await sbx.commands.run(tryCommand());
    assert.ok(!c.stdout.includes("hello from the host"), c.stdout);
    assert.equal(conns, before, `the host saw ${conns - before} connections from the denied sandbox`);
    return `${r.error.name}; command: ${c.stdout.trim().split("\n").join(" | ").slice(0, 120)}`;
  });
}

await check("denyOut, allowOut and updateNetwork narrow the operator's list while the sandbox runs", async () => {
  const sbx = await Sandbox.create({ ...netOpts, network: { denyOut: ["127.0.0.1"] } });
  const reach = async (want, what) => {
    const before = conns;
    const r = await sbx.runCode(fetchCode);
    assert.equal(r.text === "hello from the host", want, `${what}: ${r.text} ${JSON.stringify(r.error)}`);
    assert.equal(conns > before, want, `${what}: the host saw ${conns - before} connections`);
  };
  await reach(false, "denyOut of the host's address");
  await sbx.updateNetwork({ allowOut: ["127.0.0.1"], denyOut: [ALL_TRAFFIC] });
  await reach(true, "allowOut of it, all else denied");
  await sbx.updateNetwork({ allowInternetAccess: false });
  await reach(false, "allowInternetAccess false");
  const info = await sbx.getInfo();
  assert.deepEqual(info.network?.denyOut, ["0.0.0.0/0"], JSON.stringify(info.network));
  await sbx.updateNetwork({});
  await reach(true, "no rules: the operator's list alone");
  return JSON.stringify(info.network);
});

await stop();
await finish();

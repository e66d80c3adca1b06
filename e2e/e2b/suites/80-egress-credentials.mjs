// E2B's network rules, as the SDK sends them (Sandbox.create({network:
// {allowOut, rules: {host: [{transform: {headers}}]}}})): codecage's
// egress proxy adds the headers to the sandbox's HTTPS requests to that
// host, from outside it, so the sandbox never holds their values. The
// host is an HTTPS server started here under a certificate of its own,
// which the operator's SANDBOX_EGRESS_ROOTS trusts; the codecage serve is
// a second one started here with the network profile.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import https from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox } from "@e2b/code-interpreter";
import { check, finish, startServe } from "../lib.mjs";

const dir = mkdtempSync(join(tmpdir(), "codecage-e2e-credentials-"));
execFileSync("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
  "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
  "-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem")], { stdio: "ignore" });

const seen = [];
const api = https.createServer({ key: readFileSync(join(dir, "key.pem")), cert: readFileSync(join(dir, "cert.pem")) }, (req, res) => {
  const auth = req.headers.authorization ?? "";
  seen.push(`${req.url} ${auth}`);
  res.setHeader("X-Echo", auth);
  res.end(`you sent: ${auth}`);
});
await new Promise((r) => api.listen(0, "127.0.0.1", r));
const port = api.address().port;

const served = await startServe("credentials", [], {
  SANDBOX_ENABLE_NETWORK: "true",
  SANDBOX_NETWORK_ALLOW: `localhost:${port}`,
  SANDBOX_EGRESS_ROOTS: join(dir, "cert.pem"),
});
const opts = { apiUrl: served.url, sandboxUrl: served.url, timeoutMs: 120_000 };
const stop = async () => {
  await served.stop();
  api.close();
  rmSync(dir, { recursive: true, force: true });
};

const canary = `sk-${Date.now()}-${Math.random().toString(36).slice(2)}`;
// E2B gives the whole header value; it is the secret, masked whole.
const masked = `you sent: ${"*".repeat(`Bearer ${canary}`.length)}`;
let sbx;

await check("Sandbox.create({network: {rules}}): the proxy adds the header to a program's HTTPS request", async () => {
  sbx = await Sandbox.create({
    ...opts,
    network: { allowOut: ["localhost"], rules: { localhost: [{ transform: { headers: { Authorization: `Bearer ${canary}` } } }] } },
  });
  const r = await sbx.commands.run(`curl -sS https://localhost:${port}/v1/curl`);
  assert.equal(r.stdout, masked);
  assert.equal(seen.at(-1), `/v1/curl Bearer ${canary}`);
  return r.stdout.slice(0, 40) + "…";
});

await check("runCode's Python gets the same", async () => {
  const ex = await sbx.runCode(
    `import urllib.request\nr = urllib.request.urlopen("https://localhost:${port}/v1/python")\nprint(r.read().decode(), r.headers.get("X-Echo"))`,
  );
  assert.equal(ex.error, undefined, JSON.stringify(ex.error));
  assert.equal(ex.logs.stdout.join(""), `${masked} None\n`);
  assert.equal(seen.at(-1), `/v1/python Bearer ${canary}`);
});

await check("getInfo names the rule's header, never its value; the sandbox's environment has none", async () => {
  const info = await sbx.getInfo();
  const text = JSON.stringify(info);
  assert.ok(!text.includes(canary), text);
  const env = await sbx.commands.run("env; cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'");
  assert.ok(!env.stdout.includes(canary), "the canary in the sandbox's environment");
  assert.ok(env.stdout.includes("SSL_CERT_FILE=/opt/codecage/trust/bundle.pem"), env.stdout);
  assert.ok(!served.log().includes(canary), "codecage's own log has the canary");
  return JSON.stringify(info.network ?? {}).slice(0, 160);
});

await check("updateNetwork replaces the rules: without them the request leaves bare", async () => {
  await sbx.updateNetwork({ allowOut: ["localhost"] });
  const r = await sbx.commands.run(`curl -sS https://localhost:${port}/v1/after || true`);
  // Spliced now: curl sees the server's own certificate, which the
  // sandbox does not trust, and sends nothing the server could record.
  assert.ok(!r.stdout.includes("you sent"), r.stdout);
  assert.ok(!seen.some((s) => s.startsWith("/v1/after")), JSON.stringify(seen));
  const info = await sbx.getInfo();
  assert.equal(info.network?.rules, undefined, JSON.stringify(info.network));
});

await sbx?.kill().catch(() => {});
await stop();
await finish();

// Sandbox ports (getHost) and getMetrics, as E2B's own tests call them
// (js-sdk tests/sandbox/host.test.ts, network.test.ts's allowPublicTraffic
// cases, metrics.test.ts). The SDK's host is <port>-<id>.<domain>, with
// the domain codecage announces at create (SANDBOX_E2B_DOMAIN; here
// localhost:<E2B port>); node does not resolve *.localhost, so each fetch
// looks the name up as 127.0.0.1 itself. codecage asks for the traffic
// token unless the sandbox was created with allowPublicTraffic: true
// (E2B's default is public).
import assert from "node:assert/strict";
import http from "node:http";
import { Sandbox } from "@e2b/code-interpreter";
import { check, create, finish, rejects, sleep } from "../lib.mjs";

// fetchHost GETs path from a getHost host, resolved to loopback.
function fetchHost(host, path = "/", headers = {}) {
  const u = new URL(`http://${host}${path}`);
  return new Promise((resolve, reject) => {
    const req = http.get(
      {
        hostname: u.hostname,
        port: u.port || 80,
        path: u.pathname + u.search,
        headers,
        lookup: (_name, opts, cb) => (opts && opts.all ? cb(null, [{ address: "127.0.0.1", family: 4 }]) : cb(null, "127.0.0.1", 4)),
      },
      (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (c) => (body += c));
        res.on("end", () => resolve({ status: res.statusCode, body }));
      },
    );
    req.on("error", reject);
    req.setTimeout(10_000, () => req.destroy(new Error("timed out")));
  });
}

// until retries fetchHost until it answers 200 (the server starts in the
// background), as E2B's tests do.
async function until200(host, path, headers) {
  let res;
  for (let i = 0; i < 40; i++) {
    res = await fetchHost(host, path, headers);
    if (res.status === 200) return res;
    await sleep(250);
  }
  return res;
}

const sbx = await create({ timeoutMs: 120_000 });
const token = { "e2b-traffic-access-token": sbx.trafficAccessToken };

await check("host.test: ping server in running sandbox (with the traffic token)", async () => {
  assert.ok(sbx.trafficAccessToken, "create gave no trafficAccessToken");
  await sbx.files.write("/home/user/hello.txt", "hello from the sandbox\n");
  await sbx.commands.run("python3 -m http.server 8000", { background: true });
  const host = sbx.getHost(8000);
  assert.match(host, new RegExp(`^8000-${sbx.sandboxId}\\.`));
  const res = await until200(host, "/hello.txt", token);
  assert.equal(res.status, 200, `GET ${host}/hello.txt: ${res.status} ${res.body.slice(0, 200)}`);
  assert.equal(res.body, "hello from the sandbox\n");
  return host;
});

await check("network.test: allowPublicTraffic=false: a request without the traffic token is refused (403)", async () => {
  const res = await fetchHost(sbx.getHost(8000), "/hello.txt");
  assert.equal(res.status, 403, res.body);
  assert.ok(!res.body.includes("hello from the sandbox"));
});

await check("another sandbox's traffic token is refused (403)", async () => {
  const other = await create({ timeoutMs: 60_000 });
  const res = await fetchHost(sbx.getHost(8000), "/hello.txt", { "e2b-traffic-access-token": other.trafficAccessToken });
  assert.equal(res.status, 403, res.body);
});

await check("the traffic token opens ports only: as the envd token, the SDK's files, commands and runCode are refused", async () => {
  assert.ok(sbx.envdAccessToken, "create gave no envdAccessToken");
  assert.notEqual(sbx.trafficAccessToken, sbx.envdAccessToken, "the traffic token is the envd token");
  // What a holder of the traffic token alone can build with the SDK.
  const holder = new Sandbox({
    sandboxId: sbx.sandboxId,
    sandboxDomain: sbx.sandboxDomain,
    envdVersion: sbx.envdApi.version,
    envdAccessToken: sbx.trafficAccessToken,
    trafficAccessToken: sbx.trafficAccessToken,
  });
  const seen = [];
  seen.push(await rejects(holder.files.read("/home/user/hello.txt"), undefined, "files.read"));
  seen.push(await rejects(holder.files.write("/home/user/by-traffic-write", "x"), undefined, "files.write"));
  seen.push(await rejects(holder.commands.run("echo x > /home/user/by-traffic-command"), undefined, "commands.run"));
  seen.push(await rejects(holder.runCode("open('/home/user/by-traffic-run', 'w').write('x')"), undefined, "runCode"));
  for (const s of seen) assert.match(s, /401|unauthenticated|authenticat|access token/i, s);
  // The SDK's context calls carry the traffic token alone: those work.
  assert.ok(Array.isArray(await holder.listCodeContexts()), "listCodeContexts with the traffic token");
  // Nothing was written; the envd token still reads and runs.
  for (const f of ["by-traffic-write", "by-traffic-command", "by-traffic-run"]) {
    assert.equal(await sbx.files.exists(`/home/user/${f}`), false, `${f} was made with the traffic token`);
  }
  assert.equal(await sbx.files.read("/home/user/hello.txt"), "hello from the sandbox\n");
  return seen.join("; ");
});

await check("closed port answers E2B's 502 (The sandbox is running but port is not open)", async () => {
  const res = await fetchHost(sbx.getHost(8001), "/", token);
  assert.equal(res.status, 502);
  const body = JSON.parse(res.body);
  assert.equal(body.message, "The sandbox is running but port is not open");
  assert.equal(body.sandboxId, sbx.sandboxId);
  assert.equal(body.code, 502);
});

await check("network.test: allowPublicTraffic=true: sandbox works without token", async () => {
  const pub = await create({ timeoutMs: 60_000, network: { allowPublicTraffic: true } });
  await pub.commands.run("python3 -m http.server 8080", { background: true });
  const res = await until200(pub.getHost(8080), "/");
  assert.equal(res.status, 200, res.body.slice(0, 200));
});

await check("metrics.test: sbx metrics (memory used > 0, cpuCount as the sandbox's)", async () => {
  let metrics = [];
  for (let i = 0; i < 20 && metrics.length === 0; i++) {
    metrics = await sbx.getMetrics();
    if (metrics.length === 0) await sleep(250);
  }
  assert.ok(metrics.length > 0, "no metrics");
  const m = metrics[0];
  const info = await sbx.getInfo();
  assert.equal(m.cpuCount, info.cpuCount);
  assert.ok(m.memUsed > 0 && m.memUsed <= m.memTotal * 2, `memUsed ${m.memUsed} of ${m.memTotal}`);
  assert.ok(m.diskUsed > 0 && m.diskTotal >= m.diskUsed, `disk ${m.diskUsed} of ${m.diskTotal}`);
  assert.ok(m.cpuUsedPct >= 0 && m.cpuUsedPct <= 100, `cpuUsedPct ${m.cpuUsedPct}`);
  assert.ok(m.timestamp instanceof Date && Math.abs(Date.now() - m.timestamp.getTime()) < 60_000);
  return `cpu ${m.cpuUsedPct}% of ${m.cpuCount}, mem ${m.memUsed}/${m.memTotal}, disk ${m.diskUsed}/${m.diskTotal}`;
});

await check("metrics.test: sbx metrics time range", async () => {
  const start = new Date(Date.now() - 5_000);
  const end = new Date();
  const metrics = await sbx.getMetrics({ start, end });
  assert.ok(metrics.length > 0, "no metrics in the range");
  for (const m of metrics) {
    assert.ok(m.timestamp.getTime() >= start.getTime() - 10_000 && m.timestamp.getTime() <= end.getTime() + 10_000);
  }
  const none = await sbx.getMetrics({ start: new Date(start.getTime() - 3_600_000), end: new Date(start.getTime() - 1_800_000) });
  assert.equal(none.length, 0);
});

await check("host.test: ping server in non-running sandbox (502, The sandbox was not found)", async () => {
  const host = sbx.getHost(3000);
  await sbx.kill();
  const res = await fetchHost(host, "/", token);
  assert.equal(res.status, 502);
  const body = JSON.parse(res.body);
  assert.equal(body.message, "The sandbox was not found");
  assert.ok(sbx.sandboxId.startsWith(body.sandboxId));
  assert.equal(body.code, 502);
});

await finish();

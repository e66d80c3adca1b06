// One loopback per sandbox, as in E2B's VM: a server a background command
// starts is reached from runCode and from another command, one runCode
// starts is reached from a command and through getHost, and another
// sandbox reaches neither. runCode here has the operator's default
// profiles (no network profile: no urllib or socket imports), so its
// client and server are asyncio's, which the basic profile has.
import assert from "node:assert/strict";
import http from "node:http";
import { check, create, finish, sleep } from "../lib.mjs";

// fetchHost GETs path from a getHost host, resolved to loopback (node does
// not resolve *.localhost).
function fetchHost(host, path, headers) {
  const u = new URL(`http://${host}${path}`);
  return new Promise((resolve, reject) => {
    const req = http.get(
      {
        hostname: u.hostname,
        port: u.port || 80,
        path: u.pathname,
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

// fetchCell is a cell that GETs 127.0.0.1:port/path with asyncio and
// gives the body, or the error's class name.
const fetchCell = (port, path) => `
import asyncio
async def _get():
    r, w = await asyncio.open_connection("127.0.0.1", ${port})
    w.write(b"GET ${path} HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n")
    await w.drain()
    data = await r.read()
    w.close()
    return data.decode().split("\\r\\n\\r\\n", 1)[1].strip()
try:
    _r = asyncio.run(asyncio.wait_for(_get(), 10))
except Exception as e:
    _r = type(e).__name__
_r`;

const fetchCommand = (port, path) =>
  `python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:${port}${path}', timeout=10).read().decode().strip())"`;

// until retries fn until it gives want (a server starts in the background).
async function until(fn, want) {
  let got;
  for (let i = 0; i < 40; i++) {
    got = await fn();
    if (got === want) return got;
    await sleep(250);
  }
  return got;
}

const sbx = await create({ timeoutMs: 120_000 });
const token = { "e2b-traffic-access-token": sbx.trafficAccessToken };

await check("a server in a background command is fetched from runCode", async () => {
  await sbx.files.write("/home/user/hello.txt", "hello from the command's server\n");
  await sbx.commands.run("python3 -m http.server 8000", { background: true });
  const got = await until(async () => (await sbx.runCode(fetchCell(8000, "/hello.txt"))).text, "hello from the command's server");
  assert.equal(got, "hello from the command's server");
});

await check("the same server is fetched from another command", async () => {
  const r = await sbx.commands.run(fetchCommand(8000, "/hello.txt"));
  assert.equal(r.stdout.trim(), "hello from the command's server");
});

await check("a server started by runCode is fetched from a command and through getHost", async () => {
  const ex = await sbx.runCode(`
import asyncio, threading
async def _serve(r, w):
    await r.readuntil(b"\\r\\n\\r\\n")
    w.write(b"HTTP/1.0 200 OK\\r\\nContent-Length: 9\\r\\n\\r\\nfrom-code")
    await w.drain()
    w.close()
def _loop():
    async def main():
        srv = await asyncio.start_server(_serve, "127.0.0.1", 8002)
        await srv.serve_forever()
    asyncio.run(main())
threading.Thread(target=_loop, daemon=True).start()`);
  assert.equal(ex.error, undefined, JSON.stringify(ex.error));
  const r = await until(async () => (await sbx.commands.run(fetchCommand(8002, "/"))).stdout.trim(), "from-code");
  assert.equal(r, "from-code");
  const res = await fetchHost(sbx.getHost(8002), "/", token);
  assert.equal(res.status, 200, res.body.slice(0, 200));
  assert.equal(res.body, "from-code");
});

await check("another sandbox reaches neither server (its loopback is its own)", async () => {
  const other = await create({ timeoutMs: 60_000 });
  const fromCode = (await other.runCode(fetchCell(8000, "/hello.txt"))).text;
  assert.equal(fromCode, "ConnectionRefusedError");
  const r = await other.commands.run(fetchCommand(8002, "/"), { onStderr: () => {} }).catch((e) => e);
  assert.notEqual(r.exitCode, 0, "a command of the other sandbox fetched this sandbox's runCode server");
  assert.match(r.stderr, /Connection refused/);
  const res = await fetchHost(other.getHost(8000), "/hello.txt", { "e2b-traffic-access-token": other.trafficAccessToken });
  assert.equal(res.status, 502, res.body);
});

await finish();

// The client side of scripts/e2e-k8s.sh: codecage's replicas behind a
// Kubernetes Service, driven with the official MCP TypeScript client and
// plain HTTP. Usage: node k8s.mjs <phase> <service url> <api key> [args]
//   spread                 stateless runs through the Service reach every replica
//   session                a session made through the Service keeps its state over
//                          20 calls or more (REST and MCP) that land on every replica, files included;
//                          prints the session ids as JSON: {"main": id, "others": [...]}
//   lost <id> <other ids>  the deleted pod's session is lost, the others work
//   parked <id>            the deleted pod's session was parked: another replica resumes it
//   inflight <pod urls>    long runs on each pod, started before a scale-down: all answered
import assert from "node:assert/strict";
import http from "node:http";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [phase, base, key, ...args] = process.argv.slice(2);
const auth = { Authorization: `Bearer ${key}` };

// A new connection per request: kube-proxy balances connections, so a
// kept-alive one would stay on one replica.
function rest(method, url, body) {
  const data = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, agent: false, headers: { ...auth, "Content-Type": "application/json" } }, (resp) => {
      let text = "";
      resp.setEncoding("utf8");
      resp.on("data", (c) => (text += c));
      resp.on("end", () =>
        resolve({ status: resp.statusCode, replica: resp.headers["x-codecage-replica"], body: text ? JSON.parse(text) : null }),
      );
    });
    req.on("error", reject);
    if (data !== undefined) req.write(data);
    req.end();
  });
}

async function mcp() {
  const client = new Client({ name: "codecage-e2e-k8s", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`), { requestInit: { headers: auth } }));
  return client;
}

async function tool(client, name, args) {
  const res = await client.callTool({ name, arguments: args });
  if (res.isError) throw new Error(`${name}: ${res.content.map((c) => c.text).join("")}`);
  return res.structuredContent;
}

const phases = {
  async spread() {
    const seen = {};
    for (let i = 0; i < 60; i++) {
      const r = await rest("POST", `${base}/execute`, { code: "print(6 * 7)" });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal(r.body.stdout, "42\n");
      seen[r.replica] = (seen[r.replica] || 0) + 1;
    }
    console.log(`60 runs through the Service, by replica: ${JSON.stringify(seen)}`);
    assert.equal(Object.keys(seen).length, 3, "the Service did not reach all 3 replicas");
  },

  async session() {
    const client = await mcp();
    const info = await tool(client, "create_session", {});
    const id = info.session_id;
    console.log(`session ${id} created through the Service (MCP)`);
    await tool(client, "execute_code", { session_id: id, code: "n = 0" });
    await tool(client, "write_file", { session_id: id, path: "notes.txt", content: "written through MCP" });
    const landed = {};
    // At least 20 calls, and on until the REST ones have landed on all 3
    // replicas (kube-proxy picks at random: 10 can miss one, 1 in 20).
    let i = 1;
    for (; i <= 20 || (Object.keys(landed).length < 3 && i <= 100); i++) {
      let value;
      if (i % 2) {
        const r = await rest("POST", `${base}/sessions/${id}/execute`, { code: "n += 1\nn" });
        assert.equal(r.status, 200, JSON.stringify(r.body));
        landed[r.replica] = (landed[r.replica] || 0) + 1;
        value = r.body.result;
      } else {
        // A fresh MCP connection each time: stateless, any replica takes it.
        const c = await mcp();
        value = (await tool(c, "execute_code", { session_id: id, code: "n += 1\nn" })).result;
        await c.close();
      }
      assert.equal(value, i, `call ${i}`);
    }
    console.log(`${i - 1} calls kept the session's state; REST calls landed on: ${JSON.stringify(landed)}`);
    assert.equal(Object.keys(landed).length, 3, "the session's calls did not land on all 3 replicas");
    const read = await rest("GET", `${base}/sessions/${id}/files/content?path=notes.txt`);
    assert.equal(read.body.content, "written through MCP");
    const inCode = await rest("POST", `${base}/sessions/${id}/execute`, { code: "open('notes.txt').read().upper()" });
    assert.equal(inCode.body.result, "WRITTEN THROUGH MCP");
    await rest("POST", `${base}/sessions/${id}/execute`, { code: "open('made.txt', 'w').write('by code')" });
    const made = await tool(client, "read_file", { session_id: id, path: "made.txt" });
    assert.match(JSON.stringify(made), /by code/);
    // More sessions, until the other replicas hold some.
    const owner = (s) => s.slice(s.lastIndexOf("-") + 1);
    const others = [];
    let created = 1;
    for (let i = 0; i < 30 && new Set(others.map(owner)).size < 2; i++) {
      const r = await rest("POST", `${base}/sessions`, {});
      assert.equal(r.status, 201, JSON.stringify(r.body));
      created++;
      if (owner(r.body.session_id) !== owner(id)) others.push(r.body.session_id);
    }
    assert.ok(new Set(others.map(owner)).size >= 2, "no sessions on the other replicas");
    const listed = await rest("GET", `${base}/sessions`);
    assert.equal(listed.body.sessions.length, created, JSON.stringify(listed.body));
    await client.close();
    console.log(`files round-trip; ${others.length} more sessions on the other replicas; list_sessions lists ${listed.body.sessions.length}`);
    console.log("SESSIONS " + JSON.stringify({ main: id, others }));
  },

  async lost() {
    const [id, ...others] = args;
    const r = await rest("POST", `${base}/sessions/${id}/execute`, { code: "n" });
    console.log(`the deleted pod's session: ${r.status} ${r.body.kind}: ${r.body.detail}`);
    assert.equal(r.status, 410);
    assert.equal(r.body.kind, "session_lost");
    const client = await mcp();
    const res = await client.callTool({ name: "execute_code", arguments: { session_id: id, code: "n" } });
    assert.ok(res.isError, "MCP call on a lost session succeeded");
    assert.match(res.content[0].text, /session lost with its replica/);
    console.log(`MCP says: ${res.content[0].text}`);
    const listed = await rest("GET", `${base}/sessions`);
    assert.ok(!listed.body.sessions.some((s) => s.session_id === id), "list_sessions still lists the lost session");
    for (const o of others) {
      const ok = await rest("POST", `${base}/sessions/${o}/execute`, { code: "21 * 2" });
      assert.equal(ok.status, 200, `${o}: ${JSON.stringify(ok.body)}`);
      assert.equal(ok.body.result, 42);
    }
    await client.close();
    console.log(`${others.length} sessions on the other replicas still work; list_sessions lists ${listed.body.sessions.length}`);
  },

  async parked() {
    // The holder's pod was deleted after a park-enabled drain: the session
    // is resumed by another replica, its variables and files with it.
    const [id] = args;
    const r = await rest("POST", `${base}/sessions/${id}/execute`, { code: "n" });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.ok(r.body.result >= 20, `n is ${r.body.result} after the park`);
    const read = await rest("GET", `${base}/sessions/${id}/files/content?path=notes.txt`);
    assert.equal(read.body.content, "written through MCP", `${read.status} from ${read.replica}: ${JSON.stringify(read.body)}`);
    console.log(`the deleted pod's session was parked and resumed by ${r.replica}: n = ${r.body.result}, notes.txt kept`);
  },

  async inflight() {
    // args: pod base URLs. Each gets runs that last 6 s; the caller scales
    // the Deployment down 2 s in.
    const runs = args.flatMap((u) =>
      [1, 2].map(() =>
        rest("POST", `${u}/execute`, { code: "import time\ntime.sleep(6)\nprint('finished')", timeout: 20 }).then((r) => ({ u, ...r })),
      ),
    );
    const done = await Promise.all(runs);
    for (const r of done) {
      assert.equal(r.status, 200, `${r.u}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.stdout, "finished\n", `${r.u}: ${JSON.stringify(r.body)}`);
    }
    console.log(`${done.length} runs in flight during the scale-down, all answered: ${done.map((r) => r.replica).join(", ")}`);
  },
};

try {
  await phases[phase]();
} catch (e) {
  console.error(`FAIL ${phase}: ${e.stack || e}`);
  process.exit(1);
}

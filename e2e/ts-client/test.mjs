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

async function suite(label, makeTransport) {
  const client = new Client({ name: "codecage-e2e", version: "1.0.0" });
  await client.connect(makeTransport());
  await check(`${label}: list tools`, async () => {
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name);
    for (const n of ["execute_code", "validate_code", "get_sandbox_info", "create_session", "write_file", "read_file", "list_files"]) {
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
  await client.close();
}

await suite("stdio", () => new StdioClientTransport({
  command: binary,
  args: ["mcp", "--enable-data-science", "true", "--pool-size", "1", "--data-science-pool-size", "1"],
  stderr: "ignore",
}));
if (httpURL) {
  await suite("http", () => new StreamableHTTPClientTransport(new URL(httpURL)));
}
console.log(`${passes} passed, ${failures} failed`);
process.exit(failures ? 1 : 0);

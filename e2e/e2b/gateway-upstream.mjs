// A stdio MCP server for suites/75-mcp-gateway.mjs: codecage's MCP gateway
// starts it for one sandbox, outside it, with the sandbox creator's token
// in CANARY_TOKEN (the operator's gateway block says so). It logs what it
// was started with (UPSTREAM_LOG) and serves "whoami".
import { appendFileSync } from "node:fs";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const token = process.env.CANARY_TOKEN ?? "";
appendFileSync(process.env.UPSTREAM_LOG, `started with token ${token}\n`);
const server = new McpServer({ name: "canary", version: "1.0.0" });
server.registerTool(
  "whoami",
  { description: "says who asks and how long its token is", inputSchema: { name: z.string() } },
  async ({ name }) => ({ content: [{ type: "text", text: `hello ${name} from upstream (token ${token.length} bytes)` }] }),
);
await server.connect(new StdioServerTransport());

// E2B's own command line (@e2b/cli), run as a user runs it, with only the
// E2B_API_URL / E2B_SANDBOX_URL / E2B_API_KEY environment pointing it at
// codecage. `sandbox create` opens an interactive terminal, so the sandbox
// the commands work on is made with the e2b SDK, as a program would.
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { Sandbox } from "e2b";
import { expect, expectIncludes, need, eventually } from "./check.mjs";

export const name = "e2b-cli";

const require = createRequire(import.meta.url);
const BIN = join(dirname(require.resolve("@e2b/cli/package.json")), "dist", "index.js");

// e2b runs the CLI and resolves with its output; a nonzero exit rejects
// with the CLI's own last words.
function e2b(...args) {
  return new Promise((resolve, reject) => {
    // stdin is closed: `sandbox exec` forwards an open stdin to the command.
    const child = spawn(process.execPath, [BIN, ...args], {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, NO_COLOR: "1" },
      timeout: 60_000,
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    child.on("error", reject);
    child.on("close", (code, signal) => {
      if (code === 0) return resolve(out + err);
      // The CLI's own words, without the stack trace it prints under them.
      const words = `${err}\n${out}`.split("\n").map((l) => l.trim()).filter((l) => l && !l.startsWith("at ")).slice(0, 3).join(" | ");
      reject(new Error(`e2b ${args.slice(0, 2).join(" ")} exit ${code ?? signal}: ${words}`));
    });
  });
}

export const steps = [
  [
    "a sandbox to work on (e2b SDK)",
    async (ctx) => {
      const sbx = await Sandbox.create({ metadata: { via: "e2b-cli-yardstick" } });
      ctx.id = sbx.sandboxId;
      ctx.sandboxIds.add(ctx.id);
      return `sandbox ${ctx.id}`;
    },
  ],
  ["sandbox list", async (ctx) => void expectIncludes(await e2b("sandbox", "list"), need(ctx, "id"), "list")],
  [
    "sandbox list --format json --metadata",
    async (ctx) => void expectIncludes(await e2b("sandbox", "list", "--format", "json", "--metadata", "via=e2b-cli-yardstick"), need(ctx, "id"), "list"),
  ],
  ["sandbox info", async (ctx) => void expectIncludes(await e2b("sandbox", "info", need(ctx, "id")), ctx.id, "info")],
  ["sandbox exec: echo", async (ctx) => void expectIncludes(await e2b("sandbox", "exec", need(ctx, "id"), "echo", "hi-from-cli"), "hi-from-cli", "exec")],
  [
    "sandbox exec: --cwd and --env",
    async (ctx) => {
      const out = await e2b("sandbox", "exec", "--cwd", "/tmp", "--env", "WHO=cli-env", need(ctx, "id"), "sh", "-c", 'echo "$WHO"; pwd');
      expectIncludes(out, "cli-env", "exec");
      expectIncludes(out, "/tmp", "exec");
    },
  ],
  [
    "sandbox exec: nonzero exit is passed on",
    async (ctx) => {
      const err = await e2b("sandbox", "exec", need(ctx, "id"), "sh", "-c", "exit 3").then(
        () => null,
        (e) => e,
      );
      expect(err && /exit 3\b/.test(err.message), `want exit 3, got ${err ? err.message : "exit 0"}`);
    },
  ],
  [
    "sandbox exec --background, process lives on",
    async (ctx) => {
      await e2b("sandbox", "exec", "--background", need(ctx, "id"), "sh", "-c", "sleep 1; echo alive > /tmp/cli-bg.txt");
      await eventually(async () => expectIncludes(await e2b("sandbox", "exec", ctx.id, "cat", "/tmp/cli-bg.txt"), "alive", "bg file"), 8000);
    },
  ],
  [
    "sandbox exec: a process the command leaves behind lives on",
    async (ctx) => {
      await e2b("sandbox", "exec", need(ctx, "id"), "sh", "-c", "(sleep 1; echo alive > /tmp/cli-left.txt) >/dev/null 2>&1 &");
      await eventually(async () => expectIncludes(await e2b("sandbox", "exec", ctx.id, "cat", "/tmp/cli-left.txt"), "alive", "file"), 8000);
    },
  ],
  ["sandbox exec: ps aux", async (ctx) => void expectIncludes(await e2b("sandbox", "exec", need(ctx, "id"), "ps", "aux"), "PID", "ps aux")],
  ["sandbox exec: python code", async (ctx) => void expectIncludes(await e2b("sandbox", "exec", need(ctx, "id"), "python3", "-c", "print(6*7)"), "42", "exec")],
  ["sandbox metrics", async (ctx) => void (await e2b("sandbox", "metrics", need(ctx, "id")))],
  ["sandbox logs", async (ctx) => void (await e2b("sandbox", "logs", need(ctx, "id")))],
  [
    "sandbox pause, resume",
    async (ctx) => {
      await e2b("sandbox", "pause", need(ctx, "id"));
      await e2b("sandbox", "resume", ctx.id);
      expectIncludes(await e2b("sandbox", "exec", ctx.id, "echo", "back"), "back", "exec after resume");
    },
  ],
  [
    "sandbox kill, gone from list",
    async (ctx) => {
      await e2b("sandbox", "kill", need(ctx, "id"));
      const out = await e2b("sandbox", "list");
      expect(!out.includes(ctx.id), "still listed after kill");
    },
  ],
];

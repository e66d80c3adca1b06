// Mastra's E2B sandbox provider (@mastra/e2b), inside a Mastra Workspace as
// its README sets it up, driven through the workspace sandbox's own methods
// (executeCommand, processes, writeFiles) and the E2B code-mode transport
// (which runs a program with node). No model is involved.
import { Workspace } from "@mastra/core/workspace";
import { E2BSandbox, E2BCodeModeTransport } from "@mastra/e2b";
import { expect, expectIncludes, need, eventually } from "./check.mjs";

export const name = "mastra";

const run = async (ctx, cmd, args, opts) => {
  const r = await need(ctx, "sandbox").executeCommand(cmd, args, opts);
  if (r.exitCode !== 0) throw new Error(`exit ${r.exitCode}: ${(r.stderr || r.stdout).trim().slice(0, 160)}`);
  return r.stdout;
};

export const steps = [
  [
    "workspace.init starts an E2BSandbox",
    async (ctx) => {
      const sandbox = new E2BSandbox({ timeout: 300_000 });
      const workspace = new Workspace({ sandbox });
      await workspace.init();
      ctx.workspace = workspace;
      ctx.sandbox = workspace.sandbox;
      ctx.sandboxIds.add(ctx.sandbox.instance.sandboxId);
      return `sandbox ${ctx.sandbox.instance.sandboxId}`;
    },
    // The first init builds Mastra's default template (base + apt s3fs,
    // fuse), a Debian build on codecage.
    { timeoutMs: 600_000 },
  ],
  [
    "getInfo",
    async (ctx) => {
      const info = await need(ctx, "sandbox").getInfo();
      return `status ${info.status}`;
    },
  ],
  ["executeCommand: echo", async (ctx) => expectIncludes(await run(ctx, "echo", ["hi-from-mastra"]), "hi-from-mastra", "stdout")],
  [
    "executeCommand: cwd and env",
    async (ctx) => {
      const out = await run(ctx, 'echo "$GREETING" && pwd', [], { cwd: "/tmp", env: { GREETING: "hello-env" } });
      expectIncludes(out, "hello-env", "stdout");
      expectIncludes(out, "/tmp", "stdout");
    },
  ],
  [
    "writeFiles into the home",
    async (ctx) => {
      await need(ctx, "sandbox").writeFiles([
        { path: "/home/user/project/app.py", content: "print('app says hi')\n" },
        { path: "/home/user/project/data.txt", content: "some data\n" },
      ]);
    },
  ],
  ["read a written file (cat)", async (ctx) => expectIncludes(await run(ctx, "cat", ["/home/user/project/data.txt"]), "some data", "cat")],
  ["list files (ls)", async (ctx) => expectIncludes(await run(ctx, "ls", ["/home/user/project"]), "app.py", "ls")],
  ["run python code", async (ctx) => expectIncludes(await run(ctx, "python3", ["/home/user/project/app.py"]), "app says hi", "stdout")],
  [
    "writeFiles outside the home (/app)",
    async (ctx) => {
      await need(ctx, "sandbox").writeFiles([{ path: "/app/main.txt", content: "in /app\n" }]);
      expectIncludes(await run(ctx, "cat", ["/app/main.txt"]), "in /app", "cat");
    },
  ],
  [
    "processes.spawn a long-running process, list it",
    async (ctx) => {
      const h = await need(ctx, "sandbox").processes.spawn("sleep 60");
      ctx.proc = h;
      const list = await ctx.sandbox.processes.list();
      expect(list.some((p) => String(p.pid) === String(h.pid)), `pid ${h.pid} not in processes.list()`);
      return `pid ${h.pid}`;
    },
  ],
  [
    "processes: kill the spawned process",
    async (ctx) => {
      const ok = await need(ctx, "proc").kill();
      expect(ok !== false, "kill returned false");
    },
  ],
  [
    "background: a process left by a command lives on",
    async (ctx) => {
      await run(ctx, "sh", ["-c", "(sleep 1; echo alive > /tmp/mastra-bg.txt) >/dev/null 2>&1 &"]);
      await eventually(async () => expectIncludes(await run(ctx, "cat", ["/tmp/mastra-bg.txt"]), "alive", "bg file"), 6000);
    },
  ],
  [
    "code mode: E2BCodeModeTransport runs a program",
    async (ctx) => {
      const r = await new E2BCodeModeTransport().run({
        sandbox: need(ctx, "sandbox"),
        program: "console.log('code-mode-ok'); return 6 * 7;",
        toolIds: [],
        dispatch: async () => {
          throw new Error("no tools");
        },
        timeout: 30_000,
      });
      if (!r.success) throw new Error(`code mode failed: ${r.error?.message ?? JSON.stringify(r).slice(0, 160)}`);
      expectIncludes(JSON.stringify(r.result), "42", "result");
    },
  ],
  [
    "workspace.destroy kills the sandbox",
    async (ctx) => {
      await need(ctx, "workspace").destroy();
    },
  ],
];

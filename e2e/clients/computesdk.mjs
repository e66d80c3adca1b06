// ComputeSDK's E2B provider (@computesdk/e2b with computesdk's `compute`),
// driven as its README shows: runCommand (also in the background, which it
// runs with nohup), the filesystem API (including the README's /analysis
// data-science example), getInfo, destroy.
import { compute } from "computesdk";
import { e2b } from "@computesdk/e2b";
import { expect, expectIncludes, need, eventually } from "./check.mjs";

export const name = "computesdk";

const run = async (ctx, cmd, opts) => {
  const r = await need(ctx, "sandbox").runCommand(cmd, opts);
  if (r.exitCode !== 0) throw new Error(`exit ${r.exitCode}: ${(r.stderr || r.stdout).trim().slice(0, 160)}`);
  return r.stdout;
};

export const steps = [
  [
    "compute.sandbox.create",
    async (ctx) => {
      compute.setConfig({ provider: e2b({ apiKey: process.env.E2B_API_KEY }) });
      ctx.sandbox = await compute.sandbox.create();
      ctx.sandboxIds.add(ctx.sandbox.sandboxId);
      return `sandbox ${ctx.sandbox.sandboxId}`;
    },
  ],
  ["getInfo", async (ctx) => `status ${(await need(ctx, "sandbox").getInfo()).status}`],
  ["runCommand: echo", async (ctx) => expectIncludes(await run(ctx, "echo hi-from-computesdk"), "hi-from-computesdk", "stdout")],
  [
    "runCommand: python heredoc with pandas (README quick start)",
    async (ctx) =>
      expectIncludes(
        await run(ctx, "python - <<'PY'\nimport pandas as pd\ndf = pd.DataFrame({'A': [1, 2, 3], 'B': [4, 5, 6]})\nprint(f\"Sum: {df.sum().sum()}\")\nPY"),
        "Sum: 21",
        "stdout",
      ),
  ],
  [
    "runCommand: node heredoc",
    async (ctx) => expectIncludes(await run(ctx, "node - <<'JS'\nconsole.log(JSON.stringify({ message: 'from node' }))\nJS"), "from node", "stdout"),
  ],
  [
    "runCommand: cwd and env",
    async (ctx) => {
      // ComputeSDK prefixes the command with WHO=..., so the variable is
      // the program's, not the shell's that expands the line.
      const out = await run(ctx, "sh -c 'echo \"$WHO\"; pwd'", { cwd: "/tmp", env: { WHO: "csdk-env" } });
      expectIncludes(out, "csdk-env", "stdout");
      expectIncludes(out, "/tmp", "stdout");
    },
  ],
  [
    "runCommand: background (nohup) keeps running",
    async (ctx) => {
      await run(ctx, "sh -c 'sleep 1; echo alive > /tmp/csdk-bg.txt'", { background: true });
      await eventually(async () => expectIncludes(await run(ctx, "cat /tmp/csdk-bg.txt"), "alive", "bg file"), 6000);
    },
  ],
  [
    "filesystem: mkdir, writeFile, readFile in /tmp",
    async (ctx) => {
      const fs = need(ctx, "sandbox").filesystem;
      await fs.mkdir("/tmp/data");
      await fs.writeFile("/tmp/data/hello.py", 'print("Hello World")');
      expectIncludes(await fs.readFile("/tmp/data/hello.py"), "Hello World", "readFile");
    },
  ],
  [
    "filesystem: readdir, exists",
    async (ctx) => {
      const fs = need(ctx, "sandbox").filesystem;
      const entries = await fs.readdir("/tmp/data");
      expect(entries.some((e) => e.name === "hello.py"), `readdir: ${JSON.stringify(entries.map((e) => e.name))}`);
      expect(await fs.exists("/tmp/data/hello.py"), "exists is false");
    },
  ],
  ["runCommand: run the written script", async (ctx) => expectIncludes(await run(ctx, "python /tmp/data/hello.py"), "Hello World", "stdout")],
  [
    "filesystem: remove",
    async (ctx) => {
      const fs = need(ctx, "sandbox").filesystem;
      await fs.remove("/tmp/data/hello.py");
      expect(!(await fs.exists("/tmp/data/hello.py")), "still exists");
    },
  ],
  [
    "README data-science workflow in /analysis",
    async (ctx) => {
      const fs = need(ctx, "sandbox").filesystem;
      await fs.mkdir("/analysis");
      await fs.mkdir("/analysis/data");
      await fs.writeFile("/analysis/data/people.csv", "name,age\nAlice,25\nBob,30\nCharlie,35\n");
      const out = await run(ctx, "python - <<'PY'\nimport pandas as pd\ndf = pd.read_csv('/analysis/data/people.csv')\nprint('avg', df['age'].mean())\nPY");
      expectIncludes(out, "avg 30.0", "stdout");
    },
  ],
  [
    "getUrl for a port",
    async (ctx) => {
      const url = await need(ctx, "sandbox").getUrl({ port: 8000 });
      expect(/^https?:\/\//.test(url), `not a URL: ${url}`);
      return url;
    },
  ],
  ["destroy", async (ctx) => await need(ctx, "sandbox").destroy()],
];

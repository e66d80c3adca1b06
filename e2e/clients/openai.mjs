// The OpenAI Agents SDK's E2B client (@openai/agents-extensions/sandbox/e2b),
// driven as a sandbox agent's tools drive it: the session's execCommand
// (the shell tool), its editor (apply_patch), readFile and pathExists, over
// the default manifest root /workspace. No model is involved.
import { Manifest, file, dir } from "@openai/agents/sandbox";
import { E2BSandboxClient } from "@openai/agents-extensions/sandbox/e2b";
import { expect, expectIncludes, need, eventually } from "./check.mjs";

export const name = "openai-agents";

const exec = async (ctx, cmd, extra = {}) => need(ctx, "session").execCommand({ cmd, ...extra });

export const steps = [
  [
    "create a session with a manifest (root /workspace)",
    async (ctx) => {
      const client = new E2BSandboxClient();
      const manifest = new Manifest({
        entries: { "README.md": file({ content: "# hello from the manifest\n" }), data: dir() },
      });
      ctx.root = manifest.root;
      ctx.session = await client.create({ manifest });
      ctx.sandboxIds.add(ctx.session.state.sandboxId);
      return `sandbox ${ctx.session.state.sandboxId}, root ${manifest.root}`;
    },
  ],
  [
    // So that one failure does not hide the rest: with /workspace refused,
    // the steps below run on a root in the home and say so.
    "fallback: a session with root /home/user/workspace, if /workspace failed",
    async (ctx) => {
      if (ctx.session) return "not needed";
      const manifest = new Manifest({
        root: "/home/user/workspace",
        entries: { "README.md": file({ content: "# hello from the manifest\n" }), data: dir() },
      });
      ctx.session = await new E2BSandboxClient().create({ manifest });
      ctx.sandboxIds.add(ctx.session.state.sandboxId);
      ctx.root = manifest.root;
      return `the steps below run on ${manifest.root}`;
    },
  ],
  [
    "manifest file is in the root",
    async (ctx) => {
      const data = await need(ctx, "session").readFile({ path: "README.md" });
      expectIncludes(data, "hello from the manifest", "README.md");
    },
  ],
  ["exec: echo", async (ctx) => expectIncludes(await exec(ctx, "echo hi-from-exec"), "hi-from-exec", "output")],
  ["exec: pwd is the manifest root", async (ctx) => expectIncludes(await exec(ctx, "pwd"), ctx.root, "pwd")],
  [
    "exec: workdir",
    async (ctx) => expectIncludes(await exec(ctx, "pwd", { workdir: "data" }), `${ctx.root}/data`, "pwd"),
  ],
  [
    "exec: nonzero exit is reported",
    async (ctx) => expectIncludes(await exec(ctx, "exit 3"), "3", "output of exit 3"),
  ],
  [
    "exec: background process outlives its command",
    async (ctx) => {
      await exec(ctx, "(sleep 1; echo alive > bg.txt) >/dev/null 2>&1 &");
      await eventually(async () => {
        const data = await ctx.session.readFile({ path: "bg.txt" });
        expectIncludes(data, "alive", "bg.txt");
      }, 6000);
    },
  ],
  [
    "editor: create_file",
    async (ctx) => {
      const r = await need(ctx, "session").createEditor().createFile({
        type: "create_file",
        path: "notes/todo.md",
        diff: "+first line\n+second line\n",
      });
      return r?.output;
    },
  ],
  [
    "readFile of the created file",
    async (ctx) => expectIncludes(await need(ctx, "session").readFile({ path: "notes/todo.md" }), "second line", "todo.md"),
  ],
  [
    "editor: update_file",
    async (ctx) => {
      await need(ctx, "session").createEditor().updateFile({
        type: "update_file",
        path: "notes/todo.md",
        diff: "@@\n first line\n-second line\n+second line, edited\n",
      });
      expectIncludes(await ctx.session.readFile({ path: "notes/todo.md" }), "edited", "todo.md");
    },
  ],
  ["exec: list files", async (ctx) => expectIncludes(await exec(ctx, "ls -R"), "todo.md", "ls -R")],
  [
    "pathExists / directoryExists",
    async (ctx) => {
      const s = need(ctx, "session");
      expect(await s.pathExists("notes/todo.md"), "pathExists(notes/todo.md) is false");
      expect(await s.directoryExists("notes"), "directoryExists(notes) is false");
      expect(!(await s.pathExists("missing.txt")), "pathExists(missing.txt) is true");
    },
  ],
  [
    "editor: delete_file",
    async (ctx) => {
      await need(ctx, "session").createEditor().deleteFile({ type: "delete_file", path: "notes/todo.md" });
      expect(!(await ctx.session.pathExists("notes/todo.md")), "todo.md still exists");
    },
  ],
  [
    "exec: run python code",
    async (ctx) => expectIncludes(await exec(ctx, "python3 -c 'print(6*7)'"), "42", "python3 output"),
  ],
  [
    "persistWorkspace (tar of the root)",
    async (ctx) => {
      const tar = await need(ctx, "session").persistWorkspace();
      expect(tar?.length > 0, "empty archive");
      return `${tar.length} bytes`;
    },
  ],
  [
    "delete the session (kills the sandbox)",
    async (ctx) => {
      await need(ctx, "session").delete();
      expect(!(await ctx.session.running().catch(() => false)), "still running after delete");
    },
  ],
];

// Directory watches (files.watchDir), mirroring E2B's
// packages/js-sdk/tests/sandbox/files/watch.test.ts, plus what a program
// does with them here: a write by runCode and by commands.run seen, a watch
// ended by a kill, and the containment check (a watch names nothing
// outside the sandbox's own tree).
import assert from "node:assert/strict";
import { FileNotFoundError, FilesystemEventType, SandboxError } from "e2b";
import { check, create, finish, rejects } from "../lib.mjs";

// waitEvent watches dir until an event matches, then stops the watch.
async function waitEvent(sbx, dir, match, act, opts = {}) {
  const seen = [];
  let found;
  const got = new Promise((resolve) => (found = resolve));
  const handle = await sbx.files.watchDir(
    dir,
    (e) => {
      seen.push(`${e.type} ${e.name}`);
      if (match(e)) found(e);
    },
    opts,
  );
  try {
    await act();
    const e = await Promise.race([got, new Promise((r) => setTimeout(() => r(null), 20_000))]);
    assert.ok(e, `no matching event in 20 s; saw: ${seen.slice(-12).join(", ")}`);
    return seen;
  } finally {
    await handle.stop();
  }
}

const sbx = await create();

await check("watch directory changes", async () => {
  await sbx.files.makeDir("test_watch_dir");
  await sbx.files.write("test_watch_dir/test_watch.txt", "This file will be watched.");
  await waitEvent(
    sbx,
    "test_watch_dir",
    (e) => e.type === FilesystemEventType.WRITE && e.name === "test_watch.txt",
    () => sbx.files.write("test_watch_dir/test_watch.txt", "This file has been modified."),
  );
});

await check("watch recursive directory changes", async () => {
  await sbx.files.makeDir("test_recursive_watch_dir/test_nested_watch_dir");
  await sbx.files.write("test_recursive_watch_dir/test_nested_watch_dir/test_watch.txt", "This file will be watched.");
  await waitEvent(
    sbx,
    "test_recursive_watch_dir",
    (e) => e.type === FilesystemEventType.WRITE && e.name === "test_nested_watch_dir/test_watch.txt",
    () => sbx.files.write("test_recursive_watch_dir/test_nested_watch_dir/test_watch.txt", "This file has been modified."),
    { recursive: true },
  );
});

// E2B's python-sdk tests/sync/sandbox_sync/files/test_watch.py (envd 0.6.3, 0.6.4).
await check("watch directory changes with entry info (and network mounts allowed)", async () => {
  await sbx.files.makeDir("test_watch_dir_entry");
  await sbx.files.write("test_watch_dir_entry/test_watch.txt", "This file will be watched.");
  let write;
  await waitEvent(
    sbx,
    "test_watch_dir_entry",
    (e) => e.type === FilesystemEventType.WRITE && e.name === "test_watch.txt" && (write = e),
    () => sbx.files.write("test_watch_dir_entry/test_watch.txt", "This file has been modified."),
    { includeEntry: true, allowNetworkMounts: true },
  );
  assert.ok(write.entry, `no entry: ${JSON.stringify(write)}`);
  assert.equal(write.entry.name, "test_watch.txt");
  assert.equal(write.entry.path, "/home/user/test_watch_dir_entry/test_watch.txt");
  assert.equal(write.entry.type, "file");
});

await check("files.write gives envd's events: create, chmod, write (python test_watch_iterated)", async () => {
  await sbx.files.makeDir("test_watch_dir_iterated");
  const seen = [];
  const handle = await sbx.files.watchDir("test_watch_dir_iterated", (e) => seen.push(`${e.type} ${e.name}`));
  try {
    await sbx.files.write("test_watch_dir_iterated/f.txt", "new");
    const end = Date.now() + 10_000;
    while (seen.length < 3 && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
    await new Promise((r) => setTimeout(r, 300));
    assert.deepEqual(seen, ["create f.txt", "chmod f.txt", "write f.txt"]);
  } finally {
    await handle.stop();
  }
});

await check("watch recursive directory after nested folder addition", async () => {
  const dir = "test_recursive_watch_dir_add";
  await sbx.files.makeDir(dir);
  let folder, file;
  const folderSeen = new Promise((r) => (folder = r));
  const fileSeen = new Promise((r) => (file = r));
  const handle = await sbx.files.watchDir(
    dir,
    (e) => {
      if (e.type === FilesystemEventType.WRITE && e.name === "test_nested_watch_dir/test_watch.txt") file();
      else if (e.type === FilesystemEventType.CREATE && e.name === "test_nested_watch_dir") folder();
    },
    { recursive: true },
  );
  const within = (p, what) => Promise.race([p, new Promise((_, no) => setTimeout(() => no(new Error(`no ${what} event in 20 s`)), 20_000))]);
  try {
    await sbx.files.makeDir(`${dir}/test_nested_watch_dir`);
    await within(folderSeen, "folder create");
    await sbx.files.write(`${dir}/test_nested_watch_dir/test_watch.txt`, "This file will be watched.");
    await within(fileSeen, "nested file write");
  } finally {
    await handle.stop();
  }
});

await check("watch non-existing directory", () => rejects(sbx.files.watchDir("non_existing_watch_dir", () => {}), FileNotFoundError, "watchDir of a missing path"));

await check("watch file", async () => {
  await sbx.files.write("test_watch.txt", "This file will be watched.");
  return rejects(sbx.files.watchDir("test_watch.txt", () => {}), SandboxError, "watchDir of a file");
});

await check("watch sees a write by runCode", async () => {
  await sbx.files.makeDir("by_code");
  await waitEvent(
    sbx,
    "by_code",
    (e) => e.type === FilesystemEventType.WRITE && e.name === "out.txt",
    async () => {
      const ex = await sbx.runCode("open('by_code/out.txt', 'w').write('from python')");
      assert.equal(ex.error, undefined, ex.error?.value);
    },
  );
});

await check("watch sees a write by commands.run", async () => {
  await sbx.files.makeDir("by_cmd");
  await waitEvent(
    sbx,
    "/home/user/by_cmd",
    (e) => e.type === FilesystemEventType.CREATE && e.name === "sub/made.txt",
    () => sbx.commands.run("mkdir -p by_cmd/sub && echo hi > by_cmd/sub/made.txt"),
    { recursive: true },
  );
});

await check("watch is contained: no host path, no link out of the tree", async () => {
  const out = [];
  out.push(await rejects(sbx.files.watchDir("/etc", () => {}), SandboxError, "watchDir of /etc"));
  out.push(await rejects(sbx.files.watchDir("/home/user/../../etc", () => {}), SandboxError, "watchDir of a path that climbs out"));
  await sbx.runCode("import os; os.makedirs('contained', exist_ok=True); os.symlink('/etc', 'contained/etc_link')");
  out.push(await rejects(sbx.files.watchDir("contained/etc_link", () => {}), SandboxError, "watchDir through a link to /etc"));
  // A recursive watch over the link: events name the tree's own entries only.
  const seen = await waitEvent(
    sbx,
    "contained",
    (e) => e.name === "done.txt" && e.type === FilesystemEventType.WRITE,
    () => sbx.commands.run("touch /tmp/outside_ws.txt; cat contained/etc_link/hostname >/dev/null; echo x > contained/done.txt"),
    { recursive: true },
  );
  for (const s of seen) assert.ok(!s.includes("etc_link/") && !s.includes("outside_ws"), `an event outside the tree: ${s}`);
  return out.join(" | ");
});

await check("watch ends when its sandbox is killed", async () => {
  const other = await create();
  let exited;
  const ended = new Promise((r) => (exited = r));
  await other.files.watchDir(".", () => {}, { onExit: (err) => exited(err ?? "clean"), timeoutMs: 0 });
  await other.kill();
  const how = await Promise.race([ended, new Promise((r) => setTimeout(() => r(null), 20_000))]);
  assert.ok(how, "onExit was not called within 20 s of the kill");
  return `onExit: ${how instanceof Error ? `${how.constructor.name}: ${how.message.slice(0, 100)}` : how}`;
});

await finish();

// The user's whole filesystem through files.* (/tmp, the read-only system
// tree) and file metadata (envd 0.6.2), as E2B's js-sdk tests call them:
// packages/js-sdk/tests/sandbox/files/{read,write,info,list,exists,remove}.test.ts.
import assert from "node:assert/strict";
import { FileNotFoundError, SandboxError } from "e2b";
import { check, create, rejects, finish } from "../lib.mjs";

const sbx = await create();

// read.test.ts "read file", on /tmp: a file runCode wrote is read back.
await check("read file (/tmp, written by runCode)", async () => {
  const ex = await sbx.runCode("open('/tmp/from-code.txt', 'w').write('written by runCode')");
  assert.equal(ex.error, undefined, JSON.stringify(ex.error));
  assert.equal(await sbx.files.read("/tmp/from-code.txt"), "written by runCode");
});

// read.test.ts "read non-existing file".
await check("read non-existing file (/tmp)", async () => {
  return rejects(sbx.files.read("/tmp/no-such-file.txt"), FileNotFoundError, "read /tmp/no-such-file.txt");
});

// write.test.ts "write file", on /tmp: a command reads it back.
await check("write file (/tmp, read by a command)", async () => {
  const info = await sbx.files.write("/tmp/test_write.txt", "This is a test file.");
  assert.equal(info.path, "/tmp/test_write.txt");
  assert.equal(info.name, "test_write.txt");
  const r = await sbx.commands.run("cat /tmp/test_write.txt");
  assert.equal(r.stdout, "This is a test file.");
});

// write.test.ts "write file with metadata" (envd >= 0.6.2).
await check("write file with metadata", async () => {
  const info = await sbx.files.write("meta.txt", "x", { metadata: { Owner: "alice", tag: "a-b" } });
  assert.deepEqual(info.metadata, { owner: "alice", tag: "a-b" });
  const got = await sbx.files.getInfo("meta.txt");
  assert.deepEqual(got.metadata, { owner: "alice", tag: "a-b" });
  const listed = (await sbx.files.list(".")).find((e) => e.name === "meta.txt");
  assert.deepEqual(listed?.metadata, { owner: "alice", tag: "a-b" });
  // Overwriting replaces the whole set, as envd does.
  const again = await sbx.files.write("meta.txt", "y", { metadata: { tag: "c" } });
  assert.deepEqual(again.metadata, { tag: "c" });
  const plain = await sbx.files.write("meta.txt", "z");
  assert.equal(plain.metadata, undefined);
});

// write.test.ts: metadata set in the sandbox (user.e2b.* xattrs) shows too.
await check("getInfo returns metadata set out-of-band (user.e2b.* xattr)", async () => {
  const ex = await sbx.runCode("import os\nopen('/tmp/x.txt','w').write('x')\nos.setxattr('/tmp/x.txt', 'user.e2b.source', b'code')");
  assert.equal(ex.error, undefined, JSON.stringify(ex.error));
  const info = await sbx.files.getInfo("/tmp/x.txt");
  assert.deepEqual(info.metadata, { source: "code" });
});

// write.test.ts "write multiple files" with metadata (one set for each).
await check("write multiple files with metadata (/tmp and the home)", async () => {
  const infos = await sbx.files.write(
    [
      { path: "/tmp/multi/a.txt", data: "a" },
      { path: "multi/b.txt", data: "b" },
    ],
    { metadata: { batch: "1" } },
  );
  assert.deepEqual(infos.map((i) => [i.path, i.metadata?.batch]), [
    ["/tmp/multi/a.txt", "1"],
    ["/home/user/multi/b.txt", "1"],
  ]);
});

// info.test.ts "get info of a file" on /tmp, and of the system tree.
await check("get info of a file (/tmp) and of /usr/bin", async () => {
  const info = await sbx.files.getInfo("/tmp/test_write.txt");
  assert.equal(info.type, "file");
  assert.equal(info.path, "/tmp/test_write.txt");
  assert.equal(info.size, "This is a test file.".length);
  const usr = await sbx.files.getInfo("/usr/bin");
  assert.equal(usr.type, "dir");
  assert.equal(usr.path, "/usr/bin");
});

// list.test.ts "list directory", on /tmp and /usr/bin.
await check("list directory (/tmp)", async () => {
  const names = (await sbx.files.list("/tmp")).map((e) => e.path);
  for (const want of ["/tmp/from-code.txt", "/tmp/test_write.txt", "/tmp/multi"]) {
    assert.ok(names.includes(want), `${want} not in ${JSON.stringify(names)}`);
  }
  const bin = await sbx.files.list("/usr/bin");
  assert.ok(bin.some((e) => e.name === "python3"), "no python3 in /usr/bin");
});

// read.test.ts on the read-only system tree: readable as in E2B's VM.
await check("read file of the system tree (/usr/lib/os-release)", async () => {
  const text = await sbx.files.read("/usr/lib/os-release");
  assert.match(text, /^PRETTY_NAME=|\nID=/);
});

// exists.test.ts "exists" / "does not exist", on /tmp and /usr.
await check("exists (/tmp, /usr/bin/python3) and does not exist", async () => {
  assert.equal(await sbx.files.exists("/tmp/test_write.txt"), true);
  assert.equal(await sbx.files.exists("/usr/bin/python3"), true);
  assert.equal(await sbx.files.exists("/tmp/nope"), false);
});

// rename and makeDir on /tmp.
await check("makeDir and rename in /tmp", async () => {
  assert.equal(await sbx.files.makeDir("/tmp/newdir/sub"), true);
  const moved = await sbx.files.rename("/tmp/test_write.txt", "/tmp/newdir/sub/moved.txt");
  assert.equal(moved.path, "/tmp/newdir/sub/moved.txt");
  const r = await sbx.commands.run("cat /tmp/newdir/sub/moved.txt");
  assert.equal(r.stdout, "This is a test file.");
});

// remove.test.ts "remove file", on /tmp: the interpreter no longer sees it.
await check("remove file (/tmp)", async () => {
  await sbx.files.remove("/tmp/from-code.txt");
  assert.equal(await sbx.files.exists("/tmp/from-code.txt"), false);
  const ex = await sbx.runCode("import os; os.path.exists('/tmp/from-code.txt')");
  assert.equal(ex.text, "False");
});

// The read-only system tree: a write is refused, as E2B refuses the
// user's write there (permission denied).
await check("write to /usr is refused (permission denied)", async () => {
  const r = await rejects(sbx.files.write("/usr/codecage-e2e.txt", "x"), SandboxError, "write /usr/codecage-e2e.txt");
  assert.match(r, /permission denied/i);
  // A machine's /etc is its own; its system directories are not.
  const m = await rejects(sbx.files.makeDir("/usr/lib/codecage-e2e"), SandboxError, "makeDir /usr/lib/codecage-e2e");
  assert.match(m, /permission denied/i);
  return r;
});

// A symlink in /tmp to a host path is resolved in the sandbox's terms.
await check("a /tmp symlink to /etc/shadow gives no host content", async () => {
  const ex = await sbx.runCode("import os\nos.symlink('/etc/shadow', '/tmp/shadow')");
  assert.equal(ex.error, undefined, JSON.stringify(ex.error));
  return rejects(sbx.files.read("/tmp/shadow"), null, "read /tmp/shadow");
});

await finish();

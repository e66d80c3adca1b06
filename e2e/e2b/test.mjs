// End-to-end test of codecage's E2B-compatible surface with the OFFICIAL E2B
// JS SDKs (e2b 2.51.0, @e2b/code-interpreter 2.8.0), used unchanged: the SDKs
// are pointed at codecage only through environment variables.
//
// Required env:
//   E2B_API_URL              control plane, e.g. http://127.0.0.1:PORT
//   E2B_SANDBOX_URL          sandbox router (bare origin), usually the same
//   E2B_API_KEY              first tenant's key ("alice")
//   CODECAGE_E2B_SECOND_KEY  second tenant's key ("bob"), for the cross-key checks
// Optional:
//   E2E_KEEP_GOING=1         run every check and report all failures (default:
//                            stop at the first failure)
//
// Prints one line per check ("ok NAME" / "FAIL NAME: ..."); exits non-zero on
// failure.
import assert from "node:assert/strict";
import { Sandbox, CommandExitError, SandboxNotFoundError, AuthenticationError, TimeoutError } from "@e2b/code-interpreter";
import { Sandbox as BaseSandbox, Template, TemplateError } from "e2b";

// The environment, check, rejects and cleanup are lib.mjs's, shared with
// the feature suites.
import { ALICE, BOB, SANDBOX_URL, check, describe, finish, rejects, sleep, track } from "./lib.mjs";

function execSummary(ex) {
  return JSON.stringify({
    text: ex.text,
    results: ex.results.map((r) => r.formats()),
    stdout: ex.logs.stdout,
    stderr: ex.logs.stderr,
    error: ex.error && { name: ex.error.name, value: ex.error.value },
  }).slice(0, 600);
}

async function listIds(opts) {
  const ids = [];
  const pager = BaseSandbox.list(opts);
  while (pager.hasNext) for (const s of await pager.nextItems()) ids.push(s.sandboxId);
  return ids;
}


// ---------------------------------------------------------------------------
let sbx;
await check("Sandbox.create() (code-interpreter template)", async () => {
  sbx = await Sandbox.create();
  track(sbx, ALICE);
  assert.ok(sbx.sandboxId, "no sandboxId");
  assert.equal(await sbx.isRunning(), true, "isRunning() right after create");
  return sbx.sandboxId;
});

// --- code interpreter ------------------------------------------------------
await check("runCode: state persists between runs (x = 41; x + 1 -> 42)", async () => {
  const a = await sbx.runCode("x = 41");
  assert.equal(a.error, undefined, `x = 41 failed: ${execSummary(a)}`);
  const b = await sbx.runCode("x + 1");
  assert.equal(b.error, undefined, execSummary(b));
  assert.equal(b.text, "42", execSummary(b));
  const main = b.results.filter((r) => r.isMainResult);
  assert.equal(main.length, 1, `expected one main result: ${execSummary(b)}`);
  assert.equal(main[0].text, "42");
});

await check("runCode: print output arrives through onStdout while the code still runs", async () => {
  // 'a' is printed, then the code sleeps 1.5 s, then prints 'b'. Streamed,
  // 'a' reaches onStdout about 1.5 s before 'b' and before runCode resolves;
  // buffered until the end, both arrive together.
  const code = "import time\nprint('a', flush=True)\ntime.sleep(1.5)\nprint('b')";
  const seen = [];
  const t0 = performance.now();
  const ex = await sbx.runCode(code, { onStdout: (m) => seen.push([m.line, performance.now() - t0]) });
  const resolvedAt = performance.now() - t0;
  assert.equal(ex.error, undefined, execSummary(ex));
  assert.ok(seen.length > 0, "onStdout was never called");
  assert.equal(seen.map(([l]) => l).join(""), "a\nb\n", `stdout lines: ${JSON.stringify(seen)}`);
  assert.deepEqual(ex.logs.stdout.join(""), "a\nb\n");
  const [, firstAt] = seen[0];
  const bAt = seen.find(([l]) => l.includes("b"))[1];
  assert.ok(firstAt < resolvedAt, `first onStdout at +${firstAt} ms, resolved at +${resolvedAt} ms`);
  assert.ok(bAt - firstAt >= 300, `'a' arrived only ${Math.round(bAt - firstAt)} ms before 'b' (the code slept 1.5 s between them): output is not streamed`);
  return `'a' at +${Math.round(firstAt)} ms, 'b' at +${Math.round(bAt)} ms, resolved at +${Math.round(resolvedAt)} ms`;
});

await check("runCode: matplotlib figure comes back as a PNG result", async () => {
  const ex = await sbx.runCode("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()");
  assert.equal(ex.error, undefined, execSummary(ex));
  const r = ex.results.find((x) => x.png);
  assert.ok(r, `no png result: ${execSummary(ex)}`);
  const bytes = Buffer.from(r.png, "base64");
  assert.deepEqual([...bytes.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], "not a PNG signature");
  return `${bytes.length} bytes, formats ${JSON.stringify(r.formats())}`;
});

await check("runCode: an exception is reported in execution.error", async () => {
  const errs = [];
  const ex = await sbx.runCode('raise ValueError("boom")', { onError: (e) => errs.push(e) });
  assert.ok(ex.error, `no error: ${execSummary(ex)}`);
  assert.equal(ex.error.name, "ValueError");
  assert.match(ex.error.value, /boom/);
  assert.equal(typeof ex.error.traceback, "string");
  assert.match(ex.error.traceback, /ValueError/);
  assert.equal(errs.length, 1, "onError not called once");
});

await check("runCode: a DataFrame as last expression gives an html result", async () => {
  const probe = await sbx.runCode("import pandas");
  if (probe.error) {
    assert.equal(probe.error.name, "ModuleNotFoundError", `import pandas: ${execSummary(probe)}`);
    return "SKIPPED: pandas is not importable in this sandbox";
  }
  const ex = await sbx.runCode("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})");
  assert.equal(ex.error, undefined, execSummary(ex));
  const main = ex.results.find((r) => r.isMainResult);
  assert.ok(main, `no main result: ${execSummary(ex)}`);
  assert.ok(main.html && /<table/i.test(main.html), `no html table: ${execSummary(ex)}`);
  assert.ok(main.text, "no text/plain alongside html");
});

// E2B's Result strips one pair of quotes from a text (a str's repr).
await check("runCode: a string result's text has no quotes (as E2B's Result)", async () => {
  const ex = await sbx.runCode('"hello"');
  assert.equal(ex.text, "hello", execSummary(ex));
  const it = await sbx.runCode(`"it's"`);
  assert.equal(it.text, "it's", execSummary(it));
});

// E2B's code-interpreter js/tests/images/bar.test.ts, cells as written
// there: indented template strings (E2B's kernel dedents them).
const imageCell = (last) => `
    import numpy
    from PIL import Image
    
    imarray = numpy.random.rand(16,16,3) * 255
    image = Image.fromarray(imarray.astype('uint8')).convert('RGBA')
    
    ${last}
    `;
await check("test show image", async () => {
  const ex = await sbx.runCode(imageCell('image.show()\n    print("done")'));
  assert.equal(ex.error, undefined, execSummary(ex));
  assert.ok(ex.results[0]?.png, execSummary(ex));
  assert.deepEqual(ex.logs.stdout, ["done\n"]);
});
await check("test image represent", async () => {
  const ex = await sbx.runCode(imageCell("image"));
  assert.ok(ex.results[0]?.png, execSummary(ex));
});
await check("get image on save", async () => {
  const ex = await sbx.runCode(imageCell('image.save("test.png")'));
  assert.equal(ex.error, undefined, execSummary(ex));
  assert.ok(ex.results[0]?.png, execSummary(ex));
});

await check("code contexts: create (cwd /tmp), isolated variables, list, remove", async () => {
  const ctx = await sbx.createCodeContext({ cwd: "/tmp" });
  assert.ok(ctx.id, `no context id: ${JSON.stringify(ctx)}`);
  const cwd = await sbx.runCode("import os; os.getcwd()", { context: ctx });
  assert.equal(cwd.error, undefined, execSummary(cwd));
  assert.equal(cwd.text, "/tmp", execSummary(cwd));
  const x = await sbx.runCode("x", { context: ctx });
  assert.ok(x.error, `x from the default context is visible in the new one: ${execSummary(x)}`);
  assert.equal(x.error.name, "NameError");
  await sbx.runCode("only_here = 1", { context: ctx });
  const back = await sbx.runCode("'only_here' in globals(), x", {});
  assert.equal(back.error, undefined, execSummary(back));
  assert.equal(back.text, "(False, 41)", execSummary(back));
  const listed = await sbx.listCodeContexts();
  assert.ok(Array.isArray(listed), "listCodeContexts did not return an array");
  assert.ok(listed.some((c) => c.id === ctx.id), `new context not listed: ${JSON.stringify(listed)}`);
  await sbx.removeCodeContext(ctx);
  const after = await sbx.listCodeContexts();
  assert.ok(!after.some((c) => c.id === ctx.id), `removed context still listed: ${JSON.stringify(after)}`);
  return `context ${ctx.id}, ${listed.length} listed before removal`;
});

// --- files -----------------------------------------------------------------
await check("files.write + files.read (/home/user/a.txt)", async () => {
  const info = await sbx.files.write("/home/user/a.txt", "hello");
  assert.equal(info.path, "/home/user/a.txt");
  assert.equal(info.name, "a.txt");
  assert.equal(await sbx.files.read("/home/user/a.txt"), "hello");
});

await check("files.write with a relative path lands in /home/user", async () => {
  const info = await sbx.files.write("rel.txt", "relative");
  assert.equal(info.path, "/home/user/rel.txt");
  assert.equal(await sbx.files.read("/home/user/rel.txt"), "relative");
  const ex = await sbx.runCode("open('/home/user/rel.txt').read()");
  assert.equal(ex.text, "relative", `kernel does not see the file: ${execSummary(ex)}`);
});

await check("files.list /home/user shows a.txt as a file", async () => {
  const entries = await sbx.files.list("/home/user");
  const a = entries.find((e) => e.name === "a.txt");
  assert.ok(a, `a.txt not listed: ${JSON.stringify(entries.map((e) => e.name))}`);
  assert.equal(a.type, "file");
  assert.equal(a.path, "/home/user/a.txt");
  assert.equal(a.size, 5);
});

await check("files.exists true / false", async () => {
  assert.equal(await sbx.files.exists("/home/user/a.txt"), true);
  assert.equal(await sbx.files.exists("/home/user/does-not-exist"), false);
});

await check("files.makeDir, rename, getInfo, remove", async () => {
  assert.equal(await sbx.files.makeDir("/home/user/d1"), true, "makeDir of a new dir");
  assert.equal(await sbx.files.makeDir("/home/user/d1"), false, "makeDir of an existing dir");
  const d = await sbx.files.getInfo("/home/user/d1");
  assert.equal(d.type, "dir");
  await sbx.files.write("/home/user/d1/old.txt", "moved");
  const moved = await sbx.files.rename("/home/user/d1/old.txt", "/home/user/d1/new.txt");
  assert.equal(moved.path, "/home/user/d1/new.txt");
  assert.equal(await sbx.files.exists("/home/user/d1/old.txt"), false);
  const info = await sbx.files.getInfo("/home/user/d1/new.txt");
  assert.equal(info.name, "new.txt");
  assert.equal(info.type, "file");
  assert.equal(info.size, 5);
  assert.ok(info.modifiedTime instanceof Date && !isNaN(info.modifiedTime), "modifiedTime");
  await sbx.files.remove("/home/user/d1/new.txt");
  assert.equal(await sbx.files.exists("/home/user/d1/new.txt"), false);
  await sbx.files.remove("/home/user/d1");
  assert.equal(await sbx.files.exists("/home/user/d1"), false);
});

// E2B's js-sdk tests/sandbox/files/info.test.ts: modes without Go's type bits.
await check("get info of a directory (mode 0o755, as E2B's)", async () => {
  await sbx.files.makeDir("test_dir");
  const info = await sbx.files.getInfo("test_dir");
  assert.equal(info.type, "dir");
  assert.equal(info.mode, 0o755, `mode ${info.mode}`);
  assert.equal(info.permissions, "drwxr-xr-x");
  await sbx.files.remove("test_dir");
});

// E2B's js-sdk tests/sandbox/files/remove.test.ts.
await check("remove non-existing file", async () => {
  await sbx.files.remove("non_existing_file.txt");
});

// E2B's js-sdk tests/template/exists.test.ts.
await check("check if base template name exists", async () => {
  assert.equal(await Template.exists("base"), true);
  assert.equal(await Template.exists("code-interpreter-v1"), true);
});
await check("check non existing name", async () => {
  assert.equal(await Template.exists(`nonexistent-${crypto.randomUUID()}`), false);
});

await check("files.write of several files at once", async () => {
  const infos = await sbx.files.write([
    { path: "/home/user/multi/m1.txt", data: "one" },
    { path: "/home/user/multi/m2.txt", data: "two" },
  ]);
  assert.equal(infos.length, 2, JSON.stringify(infos));
  assert.deepEqual(infos.map((i) => i.path).sort(), ["/home/user/multi/m1.txt", "/home/user/multi/m2.txt"]);
  assert.equal(await sbx.files.read("/home/user/multi/m1.txt"), "one");
  assert.equal(await sbx.files.read("/home/user/multi/m2.txt"), "two");
});

await check("files: binary round trip (bytes 0..255)", async () => {
  const bytes = new Uint8Array(256).map((_, i) => i);
  await sbx.files.write("/home/user/bin.dat", bytes.buffer);
  const back = await sbx.files.read("/home/user/bin.dat", { format: "bytes" });
  assert.deepEqual([...back], [...bytes]);
  const ex = await sbx.runCode("open('/home/user/bin.dat','rb').read() == bytes(range(256))");
  assert.equal(ex.text, "True", execSummary(ex));
});

await check("files.read of /etc/passwd is the sandbox's own, never the host's; /proc is out of reach", async () => {
  const p = await sbx.files.read("/etc/passwd");
  assert.match(p, /^user:x:1000:1000:/m);
  assert.doesNotMatch(p, /^daemon:/m, "the host's accounts");
  return rejects(sbx.files.read("/proc/1/environ"), null, "files.read('/proc/1/environ')");
});

// --- commands ----------------------------------------------------------------
// E2B's js-sdk tests/sandbox/secure.test.ts: a signed URL works on its
// own (no sandbox header), as a browser or curl would use it.
await check("test access file with signing", async () => {
  await sbx.files.write("hello.txt", "hello world");
  const res = await fetch(await sbx.downloadUrl("hello.txt"));
  assert.equal(res.status, 200, await res.clone().text());
  assert.equal(await res.text(), "hello world");
  const up = await fetch(await sbx.uploadUrl("up.txt"), { method: "POST", body: "uploaded", headers: { "Content-Type": "application/octet-stream" } });
  assert.equal(up.status, 200, await up.text());
  assert.equal(await sbx.files.read("up.txt"), "uploaded");
  const expired = await sbx.downloadUrl("hello.txt", { useSignatureExpiration: 0 });
  await sleep(2100);
  const old = await fetch(expired);
  const body = await old.text();
  assert.equal(old.status, 401, body);
  assert.match(body, /signature is already expired/);
  await sbx.files.remove("up.txt");
  return `expired: ${old.status} ${body.slice(0, 80)}`;
});

await check("commands.run: echo hi && ls /home/user (with onStdout)", async () => {
  const chunks = [];
  const r = await sbx.commands.run("echo hi && ls /home/user", { onStdout: (d) => chunks.push(d) });
  assert.equal(r.exitCode, 0);
  assert.match(r.stdout, /^hi$/m);
  assert.match(r.stdout, /^a\.txt$/m);
  assert.ok(chunks.length > 0, "onStdout not called");
  assert.equal(chunks.join(""), r.stdout);
});

await check("commands.run: a failing command raises CommandExitError", async () => {
  let e = await sbx.commands.run("exit 3").catch((err) => err);
  assert.ok(e instanceof CommandExitError, `exit 3: expected CommandExitError, got ${describe(e)}`);
  assert.equal(e.exitCode, 3);
  e = await sbx.commands.run("ls /nonexistent").catch((err) => err);
  assert.ok(e instanceof CommandExitError, `ls /nonexistent: expected CommandExitError, got ${describe(e)}`);
  assert.notEqual(e.exitCode, 0);
  assert.ok(e.stderr.length > 0, "no stderr from ls /nonexistent");
  return `ls /nonexistent: exit ${e.exitCode}, stderr ${JSON.stringify(e.stderr.trim())}`;
});

await check("commands.run: envs and cwd options", async () => {
  const r = await sbx.commands.run("echo $FOO; pwd", { envs: { FOO: "bar" }, cwd: "/tmp" });
  assert.equal(r.stdout, "bar\n/tmp\n");
  const d = await sbx.commands.run("pwd");
  assert.equal(d.stdout, "/home/user\n", "default cwd");
});

await check("commands: background command, list, kill, wait rejects", async () => {
  const h = await sbx.commands.run('python3 -c "import time; time.sleep(30)"', { background: true });
  assert.ok(h.pid > 0, `pid ${h.pid}`);
  const procs = await sbx.commands.list();
  assert.ok(procs.some((p) => p.pid === h.pid), `pid ${h.pid} not in commands.list(): ${JSON.stringify(procs)}`);
  const t0 = Date.now();
  assert.equal(await h.kill(), true, "handle.kill()");
  const waited = await rejects(h.wait(), CommandExitError, "handle.wait() after kill");
  assert.ok(Date.now() - t0 < 10_000, "wait took too long after kill");
  const procsAfter = await sbx.commands.list();
  assert.ok(!procsAfter.some((p) => p.pid === h.pid), "killed command still listed");
  assert.equal(await sbx.commands.kill(h.pid), false, "killing it again");
  return waited;
});

// E2B's VM has one /tmp for every command and the interpreter (multi-step
// shell workflows: clone into /tmp, build, run).
await check("commands.run: one /tmp for every command and runCode, as a VM's", async () => {
  await sbx.commands.run("echo hi > /tmp/f");
  const r = await sbx.commands.run("cat /tmp/f");
  assert.equal(r.stdout, "hi\n", "a later command does not see /tmp/f");
  const ex = await sbx.runCode("open('/tmp/g', 'w').write('py')\nopen('/tmp/f').read() == 'hi\\n'");
  assert.equal(ex.text, "True", execSummary(ex));
  const g = await sbx.commands.run("cat /tmp/g");
  assert.equal(g.stdout, "py", "a command does not see the interpreter's /tmp/g");
});

await check("commands.run: the programs agents expect in a shell", async () => {
  const r = await sbx.commands.run("sleep 0.1; printenv HOME; whoami; id -u; realpath .; nproc >/dev/null && ln -sf /tmp/f l && realpath l && rm l; env | grep -c ^PATH=");
  assert.equal(r.stdout, "/home/user\nuser\n1000\n/home/user\n/tmp/f\n1\n");
  // The background sleep is a shell until it has exec'ed: wait for it.
  const p = await sbx.commands.run("sleep 30 & for i in $(seq 200); do ps -e -o comm= | grep -q ^sleep && break; sleep 0.05; done; ps -e -o comm= | grep -c ^sleep; kill -9 $!");
  assert.equal(p.stdout, "1\n", "ps and kill");
});

// E2B's envd lists a symlink by its resolved target and the target's type
// (e2b Python <= 2.34 cannot parse FILE_TYPE_SYMLINK at all).
await check("files.list: a symlink has its resolved target and its target's type", async () => {
  const ex = await sbx.runCode("import os\nos.makedirs('/home/user/ln/d', exist_ok=True)\nopen('/home/user/ln/t.txt', 'w').write('x')\nfor n, t in [('f', 't.txt'), ('dd', '/home/user/ln/d'), ('gone', 'nothing'), ('out', '/proc/1/environ')]:\n    os.symlink(t, '/home/user/ln/' + n)");
  assert.equal(ex.error, undefined, execSummary(ex));
  const byName = Object.fromEntries((await sbx.files.list("/home/user/ln")).map((e) => [e.name, e]));
  assert.equal(byName.f.type, "file", JSON.stringify(byName.f));
  assert.equal(byName.f.symlinkTarget, "/home/user/ln/t.txt");
  assert.equal(byName.dd.type, "dir", JSON.stringify(byName.dd));
  assert.equal(byName.dd.symlinkTarget, "/home/user/ln/d");
  for (const n of ["gone", "out"]) {
    // A broken link has no type: the SDK leaves it out of listings, as with envd's.
    assert.equal(byName[n], undefined, JSON.stringify(byName[n]));
    const e = await sbx.files.getInfo("/home/user/ln/" + n);
    assert.equal(e.type, undefined, JSON.stringify(e));
    assert.equal(e.symlinkTarget, "/home/user/ln/" + n, "a broken link names itself");
  }
  const info = await sbx.files.getInfo("/home/user/ln/f");
  assert.equal(info.type, "file");
  return `f -> ${byName.f.symlinkTarget}, dd -> ${byName.dd.symlinkTarget}`;
});

await check("commands.run: a sandbox is a machine: any program runs, and what a command leaves in the background lives on", async () => {
  const v = await sbx.commands.run("curl --version");
  assert.equal(v.exitCode, 0, v.stderr);
  await sbx.commands.run("sh -c '(sleep 0.5; echo alive > /home/user/bg.txt) &'");
  let got = "";
  for (let i = 0; i < 400 && got === ""; i++) {
    got = await sbx.files.read("/home/user/bg.txt").catch(() => "");
    if (got === "") await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(got, "alive\n");
  const e = await sbx.commands.run("no-such-program").catch((err) => err);
  assert.ok(e instanceof CommandExitError, `expected CommandExitError, got ${describe(e)}`);
  assert.equal(e.exitCode, 127);
  return `curl ran; the background process wrote ${JSON.stringify(got)}; a missing program exits 127`;
});

await check("a sandbox's root is its own: the file API and commands share /workspace and /analysis", async () => {
  await sbx.files.makeDir("/workspace/proj");
  await sbx.files.write("/workspace/proj/a.txt", "from the file API");
  const r = await sbx.commands.run("cat /workspace/proj/a.txt && mkdir -p /analysis && echo out > /analysis/r.txt");
  assert.equal(r.stdout, "from the file API");
  assert.equal(await sbx.files.read("/analysis/r.txt"), "out\n");
  const e = await sbx.files.write("/usr/x", "no").catch((err) => err);
  assert.ok(e instanceof Error, `a write to /usr: ${describe(e)}`);
  return "/workspace/proj/a.txt read by cat; /analysis/r.txt read by files.read; /usr refused";
});

await check("commands.run({user: 'root'}) and sudo: root inside the sandbox, user by default, /usr/local root's", async () => {
  const me = await sbx.commands.run("whoami && id -u");
  assert.equal(me.stdout, "user\n1000\n");
  const r = await sbx.commands.run("whoami && pwd && mkdir -p /srv/e2b && chown user /srv/e2b && stat -c %U /srv/e2b", { user: "root" });
  assert.equal(r.stdout, "root\n/root\nuser\n", r.stderr);
  const viaSudo = await sbx.commands.run("sudo whoami && sudo -n mkdir -p /srv/sudo && stat -c %U /srv/sudo");
  assert.equal(viaSudo.stdout, "root\nroot\n", viaSudo.stderr);
  await sbx.commands.run("printf '#!/bin/sh\\necho from usr-local\\n' > /usr/local/bin/e2b-hi && chmod 755 /usr/local/bin/e2b-hi", { user: "root" });
  const tool = await sbx.commands.run("e2b-hi");
  assert.equal(tool.stdout, "from usr-local\n", tool.stderr);
  const home = await sbx.commands.run("pwd", { user: "root", cwd: "~" });
  assert.equal(home.stdout, "/root\n");
  const e = await sbx.commands.run("id -u", { user: "nobody-here" }).catch((err) => err);
  assert.ok(e instanceof Error && /user/.test(e.message), `an unknown user: ${describe(e)}`);
  return `whoami: ${me.stdout.split("\n")[0]}, as root: ${r.stdout.split("\n")[0]} in ${r.stdout.split("\n")[1]}; an unknown user is refused`;
});

// --- lifecycle ------------------------------------------------------------------
await check("Sandbox.connect from a second client sees the same state", async () => {
  const s2 = await Sandbox.connect(sbx.sandboxId);
  assert.equal(s2.sandboxId, sbx.sandboxId);
  const ex = await s2.runCode("x");
  assert.equal(ex.text, "41", execSummary(ex));
  assert.equal(await s2.files.read("/home/user/a.txt"), "hello");
  const r = await s2.commands.run("cat a.txt");
  assert.equal(r.stdout, "hello");
});

await check("setTimeout moves getInfo().endAt", async () => {
  const before = await sbx.getInfo();
  assert.equal(before.sandboxId, sbx.sandboxId);
  assert.ok(before.endAt instanceof Date && !isNaN(before.endAt), `endAt ${before.endAt}`);
  assert.ok(before.startedAt instanceof Date && !isNaN(before.startedAt), `startedAt ${before.startedAt}`);
  await sbx.setTimeout(60_000);
  const mid = await sbx.getInfo();
  assert.notEqual(mid.endAt.getTime(), before.endAt.getTime(), "endAt did not move");
  assert.ok(Math.abs(mid.endAt.getTime() - (Date.now() + 60_000)) < 15_000, `endAt ${mid.endAt.toISOString()} is not ~60 s from now`);
  await sbx.setTimeout(600_000);
  const after = await sbx.getInfo();
  assert.ok(after.endAt.getTime() > mid.endAt.getTime() + 400_000, `endAt ${after.endAt.toISOString()} did not move to ~10 min`);
  return `endAt ${before.endAt.toISOString()} -> ${mid.endAt.toISOString()} -> ${after.endAt.toISOString()}`;
});

await check("Sandbox.list includes the sandbox", async () => {
  const ids = await listIds();
  assert.ok(ids.includes(sbx.sandboxId), `${sbx.sandboxId} not in ${JSON.stringify(ids)}`);
});

// E2B's js-sdk tests/api/list.test.ts.
await check("list sandboxes started after", async () => {
  const info = await sbx.getInfo();
  const ids = await listIds({ query: { startedAfter: info.startedAt } });
  assert.ok(ids.includes(sbx.sandboxId), `${sbx.sandboxId} not in ${JSON.stringify(ids)}`);
  const later = await listIds({ query: { startedAfter: new Date(info.startedAt.getTime() + 1000) } });
  assert.ok(!later.includes(sbx.sandboxId), `${sbx.sandboxId} listed as started after it started`);
});

// --- isolation ------------------------------------------------------------------
let other;
await check("two sandboxes share nothing", async () => {
  other = await Sandbox.create();
  track(other, ALICE);
  assert.notEqual(other.sandboxId, sbx.sandboxId);
  assert.equal(await other.files.exists("/home/user/a.txt"), false, "a.txt of the first sandbox is visible");
  const ex = await other.runCode("x");
  assert.ok(ex.error, `variable x of the first sandbox is visible: ${execSummary(ex)}`);
  assert.equal(ex.error.name, "NameError");
  await other.files.write("/home/user/other.txt", "other");
  assert.equal(await sbx.files.exists("/home/user/other.txt"), false, "other.txt leaked into the first sandbox");
  const ls = await other.commands.run("ls -a /home/user");
  assert.doesNotMatch(ls.stdout, /a\.txt|rel\.txt/);
});

let bobSbx;
await check("base template (e2b Sandbox) for a second API key", async () => {
  bobSbx = await BaseSandbox.create({ apiKey: BOB });
  track(bobSbx, BOB);
  const r = await bobSbx.commands.run("echo from-base; pwd");
  assert.equal(r.stdout, "from-base\n/home/user\n");
  const info = await bobSbx.getInfo();
  return `template ${info.templateId}`;
});

await check("network rules: allowInternetAccess false, updateNetwork, getInfo", async () => {
  const box = await BaseSandbox.create({ allowInternetAccess: false });
  track(box, ALICE);
  let info = await box.getInfo();
  assert.deepEqual(info.network?.denyOut, ["0.0.0.0/0"], `getInfo's network after create: ${JSON.stringify(info.network)}`);
  // An update replaces the rules; getInfo answers them.
  await box.updateNetwork({ denyOut: ["10.0.0.0/8", "192.168.1.7"] });
  info = await box.getInfo();
  assert.deepEqual(info.network?.denyOut, ["10.0.0.0/8", "192.168.1.7"], `getInfo's network after updateNetwork: ${JSON.stringify(info.network)}`);
  // This server gives no network: an allowOut would grant, and is refused.
  const refused = await rejects(box.updateNetwork({ allowOut: ["api.example.com"] }), null, "updateNetwork with allowOut on a server without network");
  assert.match(refused, /SANDBOX_ENABLE_NETWORK/);
  await rejects(BaseSandbox.updateNetwork(box.sandboxId, {}, { apiKey: BOB }), SandboxNotFoundError, "updateNetwork with bob's key");
  assert.equal(await box.kill(), true, "kill()");
  return refused;
});

await check("another API key cannot see or reach the sandbox", async () => {
  const bobIds = await listIds({ apiKey: BOB });
  assert.ok(!bobIds.includes(sbx.sandboxId), "alice's sandbox is listed for bob");
  assert.ok(bobIds.includes(bobSbx.sandboxId), "bob's own sandbox is not listed for bob");
  const aliceIds = await listIds();
  assert.ok(!aliceIds.includes(bobSbx.sandboxId), "bob's sandbox is listed for alice");
  const c = await rejects(Sandbox.connect(sbx.sandboxId, { apiKey: BOB }), SandboxNotFoundError, "connect with bob's key");
  await rejects(BaseSandbox.getInfo(sbx.sandboxId, { apiKey: BOB }), SandboxNotFoundError, "getInfo with bob's key");
  await rejects(BaseSandbox.setTimeout(sbx.sandboxId, 1000, { apiKey: BOB }), SandboxNotFoundError, "setTimeout with bob's key");
  assert.equal(await BaseSandbox.kill(sbx.sandboxId, { apiKey: BOB }), false, "kill with bob's key");
  assert.equal(await sbx.isRunning(), true, "alice's sandbox died after bob's kill attempt");
  return c;
});

await check("an unknown API key is refused", async () => {
  return rejects(Sandbox.create({ apiKey: "e2b_" + "0".repeat(40) }), AuthenticationError, "create with a bogus key");
});

await check("sandbox traffic needs the sandbox's access token", async () => {
  const token = sbx.envdAccessToken;
  assert.ok(token, "the create response carried no envdAccessToken: anyone who learns a sandbox id could use it");
  // Through the SDK: a connected client whose token was tampered with.
  const s2 = await Sandbox.connect(sbx.sandboxId);
  s2.envdAccessToken = token.slice(0, -1) + (token.endsWith("0") ? "1" : "0");
  const viaSdk = await rejects(s2.runCode("x"), null, "runCode with a tampered token");
  // Raw requests, without and with a wrong token; with the right token as a control.
  const exec = (tok) =>
    fetch(`${SANDBOX_URL}/execute`, {
      method: "POST",
      headers: {
        "Content-Type": "application/json",
        "E2b-Sandbox-Id": sbx.sandboxId,
        "E2b-Sandbox-Port": "49999",
        ...(tok === undefined ? {} : { "X-Access-Token": tok }),
      },
      body: JSON.stringify({ code: "x" }),
    });
  const files = (tok) =>
    fetch(`${SANDBOX_URL}/files?path=${encodeURIComponent("/home/user/a.txt")}`, {
      headers: {
        "E2b-Sandbox-Id": sbx.sandboxId,
        "E2b-Sandbox-Port": "49983",
        ...(tok === undefined ? {} : { "X-Access-Token": tok }),
      },
    });
  const stat = (tok) =>
    fetch(`${SANDBOX_URL}/filesystem.Filesystem/Stat`, {
      method: "POST",
      headers: {
        "Content-Type": "application/json",
        "Connect-Protocol-Version": "1",
        "E2b-Sandbox-Id": sbx.sandboxId,
        "E2b-Sandbox-Port": "49983",
        ...(tok === undefined ? {} : { "X-Access-Token": tok }),
      },
      body: JSON.stringify({ path: "/home/user/a.txt" }),
    });
  const seen = [];
  for (const [label, req] of [
    ["/execute", exec],
    ["/files", files],
    ["Filesystem/Stat", stat],
  ]) {
    for (const [tlabel, tok] of [
      ["no token", undefined],
      ["wrong token", "wrong-" + token],
    ]) {
      const res = await req(tok);
      // The refusal names the sandbox; its random id may hold "41".
      const body = (await res.text()).replaceAll(sbx.sandboxId, "<sandbox id>");
      assert.ok(res.status < 200 || res.status >= 300, `${label} with ${tlabel}: HTTP ${res.status} ${body.slice(0, 200)}`);
      assert.doesNotMatch(body, /hello|41/, `${label} with ${tlabel} leaked data`);
      seen.push(`${label}/${tlabel}: ${res.status}`);
    }
    const ok = await req(token);
    const okBody = await ok.text();
    assert.equal(ok.status, 200, `${label} with the right token (control): HTTP ${ok.status} ${okBody.slice(0, 200)}`);
  }
  return `SDK: ${viaSdk}; raw: ${seen.join(", ")}`;
});

// --- containment ------------------------------------------------------------------
await check("containment via runCode: /etc/shadow unreadable, no network", async () => {
  const shadow = await sbx.runCode("open('/etc/shadow').read()");
  assert.ok(shadow.error, `read /etc/shadow: ${execSummary(shadow)}`);
  const net = await sbx.runCode("import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)");
  assert.ok(net.error, `network connection succeeded: ${execSummary(net)}`);
  // Refused for the right reason, not e.g. by a rate limit.
  assert.match(shadow.error.name, /^(FileNotFoundError|PermissionError|OSError)$/, `read /etc/shadow: ${execSummary(shadow)}`);
  assert.match(
    `${net.error.name}: ${net.error.value}`,
    /^(ImportError|ModuleNotFoundError|OSError|PermissionError|ConnectionError|ConnectionRefusedError|TimeoutError|socket\.\w+|gaierror)\b/,
    `socket: ${execSummary(net)}`,
  );
  return `shadow: ${shadow.error.name}: ${shadow.error.value}; socket: ${net.error.name}: ${net.error.value}`;
});

await check("containment via commands.run: /etc/shadow, uid, network", async () => {
  const cat = await sbx.commands.run("cat /etc/shadow").catch((e) => e);
  assert.ok(cat instanceof CommandExitError, `cat /etc/shadow: expected CommandExitError, got ${describe(cat)}`);
  const uid = await sbx.commands.run('python3 -c "import os; print(os.getuid(), os.geteuid())"');
  const [ruid, euid] = uid.stdout.trim().split(" ");
  assert.notEqual(ruid, "0", "commands run as root");
  assert.notEqual(euid, "0", "commands run as effective root");
  const net = await sbx.commands
    .run("python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), timeout=2)\"")
    .catch((e) => e);
  assert.ok(net instanceof CommandExitError, `network connection from a command succeeded: ${describe(net)}`);
  assert.match(cat.stderr, /shadow/, `cat /etc/shadow failed for another reason: ${describe(cat)}`);
  assert.match(net.stderr, /Error/, `the network probe failed for another reason: ${describe(net)}`);
  return `cat: exit ${cat.exitCode} ${JSON.stringify(cat.stderr.trim())}; uid ${ruid}/${euid}; net: exit ${net.exitCode}`;
});

await check("files and commands are served while code runs (as in E2B's VM)", async () => {
  // The code announces it runs, then sleeps 3 s. Meanwhile the client
  // writes a file and runs a command; both must finish before runCode does.
  const done = {};
  let side;
  const t0 = performance.now();
  const ex = await sbx.runCode("import time\nprint('running', flush=True)\ntime.sleep(3)", {
    onStdout: () => {
      side ??= Promise.all([
        sbx.files.write("/home/user/during.txt", "during").then(() => (done.write = performance.now() - t0)),
        sbx.commands.run("echo during").then((r) => (done.command = performance.now() - t0) && r),
      ]);
    },
  });
  const resolvedAt = performance.now() - t0;
  assert.equal(ex.error, undefined, execSummary(ex));
  assert.ok(side, "onStdout was never called");
  await side;
  const timing = `write done +${Math.round(done.write)} ms, command done +${Math.round(done.command)} ms, runCode done +${Math.round(resolvedAt)} ms`;
  assert.ok(done.write < resolvedAt, `files.write waited for the running code: ${timing}`);
  assert.ok(done.command < resolvedAt, `commands.run waited for the running code: ${timing}`);
  return timing;
});

// A sandbox killed under a run: the SDK sees the stream break and raises
// its TimeoutError ("the sandbox was killed"), not an in-band error.
await check("runCode and commands.run: a kill mid-run raises TimeoutError", async () => {
  const victim = await Sandbox.create();
  track(victim, ALICE);
  const run = victim.runCode("import time\nprint('started', flush=True)\ntime.sleep(30)").then((v) => v, (e) => e);
  const cmd = victim.commands.run("echo started; sleep 30").then((v) => v, (e) => e);
  await sleep(1500);
  assert.equal(await victim.kill(), true, "kill()");
  const [r, c] = await Promise.all([run, cmd]);
  assert.ok(r instanceof TimeoutError, `runCode: expected TimeoutError, got ${r instanceof Error ? describe(r) : execSummary(r)}`);
  assert.ok(c instanceof TimeoutError, `commands.run: expected TimeoutError, got ${describe(c)}`);
  return `runCode ${describe(r).slice(0, 90)}; commands.run ${describe(c).slice(0, 90)}`;
});

// --- kill ---------------------------------------------------------------------------
await check("kill: the sandbox is gone for every API", async () => {
  const id = sbx.sandboxId;
  assert.equal(await sbx.kill(), true, "kill()");
  assert.equal(await sbx.isRunning(), false, "isRunning() after kill");
  const seen = [
    "runCode " + (await rejects(sbx.runCode("1"), null, "runCode after kill")),
    "files.read " + (await rejects(sbx.files.read("/home/user/a.txt"), null, "files.read after kill")),
    "commands.run " + (await rejects(sbx.commands.run("echo"), null, "commands.run after kill")),
  ];
  await rejects(Sandbox.connect(id), SandboxNotFoundError, "Sandbox.connect after kill");
  await rejects(sbx.getInfo(), SandboxNotFoundError, "getInfo after kill");
  assert.equal(await sbx.kill(), false, "kill() again");
  assert.ok(!(await listIds()).includes(id), "killed sandbox still listed");
  return seen.join("; ");
});

await check("the other sandboxes survive", async () => {
  const ex = await other.runCode("1 + 1");
  assert.equal(ex.text, "2", execSummary(ex));
  assert.equal(await other.kill(), true);
  assert.equal(await bobSbx.kill(), true);
});

await finish();

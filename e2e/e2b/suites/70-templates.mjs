// E2B templates are codecage environments: the pinned SDK's Template
// builder builds one (request, trigger, status polling), Template.exists
// finds it, Sandbox.create(name) starts from it; what codecage cannot
// build fails with the SDK's BuildError naming the step. The server's
// wheelhouse (SANDBOX_PIP_FIND_LINKS, scripts/e2e-e2b.sh) holds the
// probe package; its operator key is alice's (E2B_API_KEY).
import assert from "node:assert/strict";
import { mkdtempSync, mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Template, BuildError, waitForFile } from "e2b";
import { Sandbox } from "@e2b/code-interpreter";
import { ALICE, BOB, check, finish, rejects, track } from "../lib.mjs";

const API = process.env.E2B_API_URL.replace(/\/$/, "");
// The REST API (scripts/e2e-e2b.sh), where an operator reads what an
// environment records.
const REST = process.env.CODECAGE_REST_URL?.replace(/\/$/, "");
const PROBE = process.env.CODECAGE_E2B_PROBE_WHEEL ?? "cagetplprobe";
const alias = `tpl-${Date.now().toString(36)}`;

await check("Template.build: Debian base, pipInstall, setEnvs", async () => {
  const logs = [];
  const t = Template().fromDebianImage().pipInstall([PROBE]).setEnvs({ A: "1" });
  const info = await Template.build(t, alias, { cpuCount: 1, memoryMB: 512, onBuildLogs: (e) => logs.push(String(e.message)) });
  assert.equal(info.templateId, alias);
  assert.equal(info.name, alias);
  assert.ok(logs.some((m) => m.includes("stage 1 of 1")), `the build's log reached onBuildLogs: ${logs.slice(0, 5)}`);
  return `${logs.length} log lines`;
});

await check("Template.exists: the built template, not an unknown name", async () => {
  assert.equal(await Template.exists(alias), true);
  assert.equal(await Template.exists(`${alias}-nope`), false);
});

await check("Sandbox.create(alias) runs in the environment: its variable and its package", async () => {
  const sbx = track(await Sandbox.create(alias));
  const ex = await sbx.runCode(`import os, ${PROBE}\nprint(os.environ.get("A"), ${PROBE}.VALUE)`);
  assert.equal(ex.error, undefined, `runCode error: ${JSON.stringify(ex.error)}`);
  assert.equal(ex.logs.stdout.join("").trim(), "1 42");
  const cmd = await sbx.commands.run(`echo "A=$A"`);
  assert.equal(cmd.stdout.trim(), "A=1");
  // A command's python3 sees the environment's packages layer too.
  const py = await sbx.commands.run(`python3 -c "import ${PROBE}; print(${PROBE}.VALUE)"`);
  assert.equal(py.stdout.trim(), "42");
  return `template ${sbx.sandboxId}`;
});

await check("looking a template up and starting from it are everyone's (bob, not an operator)", async () => {
  assert.equal(await Template.exists(alias, { apiKey: BOB }), true);
  const sbx = track(await Sandbox.create(alias, { apiKey: BOB }), BOB);
  const ex = await sbx.runCode(`import os, ${PROBE}\nprint(os.environ.get("A"), ${PROBE}.VALUE)`);
  assert.equal(ex.error, undefined, `runCode error: ${JSON.stringify(ex.error)}`);
  assert.equal(ex.logs.stdout.join("").trim(), "1 42");
});

await check("fromImage(an environment) with only metadata: a template of its own", async () => {
  const name = `${alias}-meta`;
  await Template.build(Template().fromImage(alias).setEnvs({ C: "3" }), name);
  const sbx = track(await Sandbox.create(name));
  const ex = await sbx.runCode(`import os, ${PROBE}\nprint(os.environ.get("A"), os.environ.get("C"), ${PROBE}.VALUE)`);
  assert.equal(ex.error, undefined, `runCode error: ${JSON.stringify(ex.error)}`);
  assert.equal(ex.logs.stdout.join("").trim(), "1 3 42");
  const res = await fetch(`${API}/templates/${name}`, { method: "DELETE", headers: { "X-API-KEY": ALICE } });
  assert.equal(res.status, 204, await res.text());
});

// A template over the one above: its root gets a Dockerfile stage
// (buildah) for copy and runCmd; its packages, variables and the new
// metadata carry on. A sandbox sees its root's system directories (/usr,
// /bin, /lib..., /etc/ssl), not the rest of it: the files go to /usr/local.
const chained = `${alias}-chain`;
// The build makes a Debian root (mmdebstrap, a minute or more) and runs
// buildah: it runs while the checks below do, and is awaited with a
// build's deadline, not a call's.
const ctx = mkdtempSync(join(tmpdir(), "tpl-ctx-"));
mkdirSync(join(ctx, "data"));
writeFileSync(join(ctx, "data", "hello.txt"), "hello from copy\n");
const chainLogs = [];
const chainStart = Date.now();
const chainBuild = Template.build(
  Template({ fileContextPath: ctx })
    .fromTemplate(alias)
    .copy("data/hello.txt", "/usr/local/share/tpl/hello.txt")
    .runCmd("cp /usr/local/share/tpl/hello.txt /usr/local/share/tpl/ran.txt && echo built >> /usr/local/share/tpl/ran.txt")
    // The same copy again: the same files hash in one Dockerfile stage
    // (its upload is unpacked once into the build context).
    .copy("data/hello.txt", "/usr/local/share/tpl/hello.txt")
    // Build users: a Debian root's nobody, then back to root.
    .runCmd("echo once-as-$(id -un)", { user: "nobody" })
    .setUser("nobody")
    .runCmd("echo set-as-$(id -un)")
    .setUser("root")
    .runCmd("echo back-as-$(id -un) >> /usr/local/share/tpl/ran.txt")
    .setWorkdir("/usr/local/share/tpl")
    .setEnvs({ B: "2" })
    .setStartCmd("touch /tmp/started", waitForFile("/tmp/started")),
  chained,
  { onBuildLogs: (e) => chainLogs.push(String(e.message)) },
).then(
  () => ({ secs: (Date.now() - chainStart) / 1000 }),
  (error) => ({ error }),
);

await check("an unsupported step (npmInstall) fails with the SDK's BuildError naming it", async () => {
  const t = Template().fromDebianImage().npmInstall(["left-pad"]);
  const seen = await rejects(Template.build(t, `${alias}-npm`), BuildError, "npmInstall");
  assert.match(seen, /npmInstall/);
  assert.equal(await Template.exists(`${alias}-npm`), false);
  return seen;
});

await check("a key that is not an operator's cannot build (BuildError 403)", async () => {
  const t = Template().fromDebianImage().pipInstall([PROBE]);
  const seen = await rejects(Template.build(t, `${alias}-bob`, { apiKey: BOB }), BuildError, "bob's build");
  assert.match(seen, /403/);
  return seen;
});

let chainTimer;
const chainOutcome = await Promise.race([
  chainBuild,
  new Promise((done) => {
    chainTimer = setTimeout(() => done({ error: new Error("the build took over 15 minutes") }), 900_000);
  }),
]);
clearTimeout(chainTimer);
await check("Template.build: fromTemplate, copy, runCmd, setWorkdir, setEnvs, setStartCmd (a Debian root, then buildah)", async () => {
  if (chainOutcome.error) throw chainOutcome.error;
  assert.ok(chainLogs.some((m) => m.includes("STEP") && m.includes("RUN")), "buildah's steps reached onBuildLogs");
  for (const ran of ["once-as-nobody", "set-as-nobody"]) {
    assert.ok(chainLogs.some((m) => m.trim() === ran), `no ${ran} in the build's log`);
  }
  return `built in ${chainOutcome.secs.toFixed(1)} s, ${chainLogs.length} log lines`;
});

// The same Debian root (python3 and pip, the host's release) for another
// template: aptInstall then pipInstall builds no root, it reuses that one.
await check("a second template asking for the same Debian root reuses it", async () => {
  const logs = [];
  const t0 = Date.now();
  const name = `${alias}-apt`;
  await Template.build(Template().fromDebianImage().aptInstall(["python3-pip"]).pipInstall([PROBE]), name, {
    onBuildLogs: (e) => logs.push(String(e.message)),
  });
  const secs = (Date.now() - t0) / 1000;
  assert.ok(logs.some((m) => m.includes("reusing the Debian root")), `no reuse in the log: ${logs.slice(0, 8)}`);
  const sbx = track(await Sandbox.create(name));
  const ex = await sbx.runCode(`import ${PROBE}\nprint(${PROBE}.VALUE, open("/etc/os-release").read().count("debian"))`);
  assert.equal(ex.error, undefined, `runCode error: ${JSON.stringify(ex.error)}`);
  assert.match(ex.logs.stdout.join(""), /^42 [1-9]/);
  const res = await fetch(`${API}/templates/${name}`, { method: "DELETE", headers: { "X-API-KEY": ALICE } });
  assert.equal(res.status, 204, await res.text());
  return `built in ${secs.toFixed(1)} s`;
});

// A user the root lacks fails the build at that step with E2B's words
// (which E2B's own Python SDK test asserts); the Debian root is reused.
await check("runCmd as a user the root lacks fails with E2B's invalid username (BuildError)", async () => {
  const t = Template().fromTemplate(alias).runCmd("whoami", { user: "root123" });
  const err = await Template.build(t, `${alias}-root123`).then(() => null, (e) => e);
  assert.ok(err instanceof BuildError, `expected a BuildError, got ${err}`);
  const said = /failed to run command 'whoami': command failed: unauthenticated: invalid username: 'root123'/.exec(err.message);
  assert.ok(said, `E2B's words are not in ${err.message}`);
  assert.equal(await Template.exists(`${alias}-root123`), false);
  return `BuildError: …${said[0]}`;
});

await check("Sandbox.create(chained): the copied file, runCmd's output, the base's package and variables", async () => {
  const sbx = track(await Sandbox.create(chained));
  const ex = await sbx.runCode(
    `import os, ${PROBE}\nprint(repr(open("/usr/local/share/tpl/ran.txt").read()), os.environ.get("A"), os.environ.get("B"), ${PROBE}.VALUE)`,
  );
  assert.equal(ex.error, undefined, `runCode error: ${JSON.stringify(ex.error)}`);
  assert.equal(ex.logs.stdout.join("").trim(), "'hello from copy\\nbuilt\\nback-as-root\\n' 1 2 42");
  assert.equal(await sbx.files.read("/usr/local/share/tpl/hello.txt"), "hello from copy\n");
  const cmd = await sbx.commands.run(`python3 -c "import ${PROBE}; print(${PROBE}.VALUE)"`);
  assert.equal(cmd.stdout.trim(), "42");
});

await check("the environment records the template's workdir, start and ready commands (REST, operator)", async () => {
  assert.ok(REST, "CODECAGE_REST_URL is not set (scripts/e2e-e2b.sh sets it)");
  const res = await fetch(`${REST}/environments/${chained}`, { headers: { Authorization: `Bearer ${ALICE}` } });
  const env = await res.json();
  assert.equal(res.status, 200, JSON.stringify(env));
  assert.equal(env.workdir, "/usr/local/share/tpl");
  assert.equal(env.start_cmd, "touch /tmp/started");
  assert.match(env.ready_cmd ?? "", /\/tmp\/started/);
  assert.deepEqual(env.vars, { A: "1", B: "2" });
  return `ready_cmd ${JSON.stringify(env.ready_cmd)}`;
});

await check("DELETE /templates/{alias} removes the templates", async () => {
  for (const name of [chained, alias]) {
    const res = await fetch(`${API}/templates/${name}`, { method: "DELETE", headers: { "X-API-KEY": ALICE } });
    assert.equal(res.status, 204, await res.text());
    assert.equal(await Template.exists(name), false);
  }
});

await finish();

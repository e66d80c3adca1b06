// E2B templates are codecage environments: the pinned SDK's Template
// builder builds one (request, trigger, status polling), Template.exists
// finds it, Sandbox.create(name) starts from it; what codecage cannot
// build fails with the SDK's BuildError naming the step. The server's
// wheelhouse (SANDBOX_PIP_FIND_LINKS, scripts/e2e-e2b.sh) holds the
// probe package; its operator key is alice's (E2B_API_KEY).
import assert from "node:assert/strict";
import { Template, BuildError } from "e2b";
import { Sandbox } from "@e2b/code-interpreter";
import { ALICE, BOB, check, finish, rejects, track } from "../lib.mjs";

const API = process.env.E2B_API_URL.replace(/\/$/, "");
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
  return `template ${sbx.sandboxId}`;
});

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

await check("DELETE /templates/{alias} removes the template", async () => {
  const res = await fetch(`${API}/templates/${alias}`, { method: "DELETE", headers: { "X-API-KEY": ALICE } });
  assert.equal(res.status, 204, await res.text());
  assert.equal(await Template.exists(alias), false);
});

await finish();

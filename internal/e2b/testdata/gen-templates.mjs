// Regenerate: cp internal/e2b/testdata/gen-templates.mjs e2e/e2b/ && (cd e2e/e2b && node gen-templates.mjs ../../internal/e2b/testdata/templates); rm e2e/e2b/gen-templates.mjs
// Writes the pinned SDK's serialization (TemplateBuildStartV2) of sample
// templates, the bodies the template tests post.
import { Template, waitForTimeout } from "e2b";
import fs from "node:fs";
import path from "node:path";
const out = process.argv[2];
const ctx = fs.mkdtempSync("/tmp/tplctx-");
fs.mkdirSync(path.join(ctx, "folder"));
fs.writeFileSync(path.join(ctx, "folder/test.txt"), "This is a test file.");
const T = () => Template({ fileContextPath: ctx });
const samples = {
  "debian-pip-env": T().fromDebianImage().pipInstall(["cagetplprobe==1.0"]).setEnvs({ A: "1" }),
  "apt-pip": T().fromDebianImage("bookworm").aptInstall(["curl", "jq"], { noInstallRecommends: true }).pipInstall("six"),
  "python-copy-run": T().fromPythonImage("3.12").copy("folder/*", "folder", { mode: 0o644 }).runCmd("cat folder/test.txt").setWorkdir("/app").setEnvs({ B: "two" }).setStartCmd("echo hi", waitForTimeout(1000)),
  "image-run": T().fromImage("ghcr.io/example/img:1").runCmd(["echo a", "echo b"]),
  "image-pip": T().fromImage("ghcr.io/example/img:1").pipInstall(["x"]),
  "template-pip": T().fromTemplate("mybase").pipInstall(["y"], { g: false }),
  "base-env": T().fromTemplate("base").setEnvs({ C: "3" }).setReadyCmd("true"),
  // @mastra/e2b's default template.
  "base-apt": T().fromTemplate("base").aptInstall(["s3fs", "fuse"]),
  "code-interpreter-apt": T().fromTemplate("code-interpreter-v1").aptInstall(["curl"]),
  "npm": T().fromDebianImage().npmInstall(["left-pad"]),
  "user-root": T().fromDebianImage().setUser("root"),
  "apt-after-run": T().fromDebianImage().runCmd("true").aptInstall("curl"),
  "no-template": T().fromTemplate("nope"),
  "registry": T().fromImage("ghcr.io/p/q:1", { username: "u", password: "p" }),
  "aws": T().fromAWSRegistry("123.dkr.ecr.us-east-1.amazonaws.com/x:1", { accessKeyId: "a", secretAccessKey: "b", region: "us-east-1" }),
  "apt-on-image": T().fromImage("ghcr.io/example/img:1").aptInstall("curl"),
  "pip-project": T().fromDebianImage().pipInstall(),
  "mcp-servers": T().fromTemplate("mcp-gateway").addMcpServer(["canary", "github"]),
};
for (const [name, t] of Object.entries(samples)) {
  fs.writeFileSync(path.join(out, name + ".json"), (await Template.toJSON(t, true)) + "\n");
}
fs.rmSync(ctx, { recursive: true });

// Kernels besides Python through the pinned @e2b/code-interpreter SDK:
// runCode(code, {language}) and createCodeContext({language}), mirroring
// e2b-dev/code-interpreter's js/tests (languages/js.test.ts,
// defaultKernels.test.ts, env_vars/js.test.ts, env_vars/bash.test.ts,
// kernels.test.ts). Each check is named after the E2B test it mirrors.
import assert from "node:assert/strict";
import { NotFoundError } from "@e2b/code-interpreter";
import { check, create, finish, rejects } from "../lib.mjs";

const sbx = await create();

await check("defaultKernels: test js kernel", async () => {
  const out = await sbx.runCode('console.log("Hello World!")', { language: "js" });
  assert.deepEqual(out.logs.stdout, ["Hello World!\n"]);
});

await check("defaultKernels: test esm imports", async () => {
  const out = await sbx.runCode(`
    import { readFileSync } from 'fs'
    console.log(typeof readFileSync)
    `, { language: "js" });
  assert.deepEqual(out.logs.stdout, ["function\n"]);
});

await check("defaultKernels: test top-level await and promise resolution", async () => {
  const out = await sbx.runCode(`
    await Promise.resolve('Hello World!')
    `, { language: "js" });
  assert.equal(out.text, "Hello World!");
});

await check("defaultKernels: test ts kernel", async () => {
  const out = await sbx.runCode('const message: string = "Hello World!"; console.log(message)', { language: "ts" });
  assert.deepEqual(out.logs.stdout, ["Hello World!\n"]);
});

await check("contexts: listCodeContexts starts with the python and javascript defaults (python test_list_contexts)", async () => {
  const listed = await sbx.listCodeContexts();
  assert.deepEqual(listed.slice(0, 2).map((c) => [c.language, c.cwd]), [["python", "/home/user"], ["javascript", "/home/user"]]);
  assert.ok(listed.slice(0, 2).every((c) => /^[0-9a-f-]{36}$/.test(c.id)), JSON.stringify(listed));
  await sbx.runCode("var fromDefault = 7", { language: "js" });
  const ex = await sbx.runCode("fromDefault * 6", { context: listed[1] });
  assert.equal(ex.text, "42", JSON.stringify(ex));
});

await check("languages/js: js top level await", async () => {
  const r = await sbx.runCode(`
    async function main() {
        return 'Hello, World!'
    }

    await main()
    `, { language: "js" });
  assert.equal(r.results[0].text, "Hello, World!");
});

await check("languages/js: js es6", async () => {
  const r = await sbx.runCode("\nconst add = (x, y) => x + y;\nadd(1, 2)\n", { language: "js" });
  assert.equal(r.results[0].text, "3");
});

await check("languages/js: js context", async () => {
  await sbx.runCode("const z = 1", { language: "js" });
  const r = await sbx.runCode("z", { language: "js" });
  assert.equal(r.results[0].text, "1");
});

await check("languages/js: js cwd", async () => {
  const r = await sbx.runCode("process.cwd()", { language: "js" });
  assert.equal(r.results[0].text, "/home/user");
  const ctx = await sbx.createCodeContext({ cwd: "/home", language: "js" });
  const r2 = await sbx.runCode("process.cwd()", { context: ctx });
  assert.equal(r2.results[0].text, "/home");
  return `context ${ctx.id} is ${ctx.language}`;
});

await check("languages/js: ts simple", async () => {
  const r = await sbx.runCode(`
function subtract(x: number, y: number): number {
  return x - y;
}

subtract(1, 2)
`, { language: "ts" });
  assert.equal(r.results[0].text, "-1");
});

await check("a thrown error is the execution's error (name, value, traceback)", async () => {
  const r = await sbx.runCode("function boom() { throw new TypeError('bad thing') }\nboom()", { language: "js" });
  assert.equal(r.error?.name, "TypeError");
  assert.equal(r.error?.value, "bad thing");
  assert.match(r.error?.traceback ?? "", /at boom/);
});

await check("streaming: js output reaches onStdout while the cell runs", async () => {
  const seen = [];
  let firstAt = 0;
  const start = Date.now();
  await sbx.runCode("console.log('one'); await new Promise(r => setTimeout(r, 1500)); console.log('two')", {
    language: "js",
    onStdout: (m) => {
      if (!firstAt) firstAt = Date.now() - start;
      seen.push(m.line);
    },
  });
  assert.deepEqual(seen.map((l) => l.trim()), ["one", "two"]);
  assert.ok(firstAt < 1400, `the first line came after ${firstAt} ms`);
  return `first line after ${firstAt} ms`;
});

await check("env_vars/js: env vars per execution (javascript)", async () => {
  const result = await sbx.runCode("process.env.FOO", { envs: { FOO: "bar" }, language: "javascript" });
  const empty = await sbx.runCode("process.env.FOO || 'default'", { language: "javascript" });
  assert.equal(result.results[0]?.text.trim(), "bar");
  assert.equal(empty.results[0]?.text.trim(), "default");
});

await check("env_vars/bash: env vars per execution (bash)", async () => {
  const result = await sbx.runCode("echo $FOO", { envs: { FOO: "bar" }, language: "bash" });
  const empty = await sbx.runCode("echo ${FOO:-default}", { language: "bash" });
  assert.equal(result.logs.stdout[0], "bar\n");
  assert.equal(empty.logs.stdout[0], "default\n");
});

await check("bash keeps variables and the working directory", async () => {
  await sbx.runCode("X=kept; mkdir -p sub && cd sub", { language: "bash" });
  const r = await sbx.runCode('echo "$X in $PWD"', { language: "bash" });
  assert.deepEqual(r.logs.stdout, ["kept in /home/user/sub\n"]);
});

await check("a bash context of its own (createCodeContext({language: 'bash'}))", async () => {
  const ctx = await sbx.createCodeContext({ language: "bash" });
  const r = await sbx.runCode("echo $X; pwd", { context: ctx });
  assert.deepEqual(r.logs.stdout.join(""), "\n/home/user\n");
});

await check("kernels: independence of kernels (python beside js)", async () => {
  await sbx.runCode("x = 1");
  const js = await sbx.runCode("typeof x", { language: "js" });
  assert.equal(js.results[0].text, "undefined");
});

await check("kernels: pass context and language", async () => {
  const context = await sbx.createCodeContext();
  let threw = false;
  try {
    await sbx.runCode("1", { context, language: "python" });
  } catch {
    threw = true;
  }
  assert.ok(threw, "runCode with both a context and a language did not fail");
});

// E2B's template has R and Java kernels; codecage's interpreter has not.
// Such a language is a 404 naming it and the kernels that run, which the
// SDK passes on whole as its NotFoundError (any other status but 502 it
// reduces to a SandboxError of the status line).
for (const language of ["r", "java", "cobol"]) {
  await check(`a language no kernel runs here (${language}) is NotFoundError naming it and the kernels`, async () => {
    const run = await rejects(sbx.runCode("1", { language }), NotFoundError, `runCode ${language}`);
    const ctx = await rejects(sbx.createCodeContext({ language }), NotFoundError, `createCodeContext ${language}`);
    for (const got of [run, ctx]) {
      assert.ok(got.includes(`"${language}"`) && got.includes("python, javascript, typescript, bash"), got);
    }
    return run;
  });
}

await finish();

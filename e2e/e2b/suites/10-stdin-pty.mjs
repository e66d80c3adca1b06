// stdin for commands and terminals (pty), as E2B's own SDK tests call them:
// packages/js-sdk/tests/sandbox/commands/sendStdin.test.ts and
// packages/js-sdk/tests/sandbox/pty/{ptyCreate,sendInput,resize,kill}.test.ts.
import assert from "node:assert/strict";
import { check, create, finish, rejects, sleep } from "../lib.mjs";

const sbx = await create();
const enc = new TextEncoder();

// until polls fn until it is true, or fails after ms.
async function until(fn, ms, what) {
  const end = Date.now() + ms;
  while (!(await fn())) {
    if (Date.now() > end) assert.fail(`${what}: not within ${ms} ms`);
    await sleep(50);
  }
}

for (const [name, text] of [
  ["send stdin to process", "Hello, World!"],
  ["send special characters to stdin", "!@#$%^&*()_+"],
  ["send multiline string to stdin", "Hello,\nWorld!"],
]) {
  await check(`sendStdin: ${name}`, async () => {
    const cmd = await sbx.commands.run("cat", { background: true, stdin: true });
    await sbx.commands.sendStdin(cmd.pid, text);
    await until(() => cmd.stdout === text, 5000, `cat's stdout ${JSON.stringify(cmd.stdout)}`);
    await cmd.kill();
    assert.equal(cmd.stdout, text);
  });
}

await check("sendStdin: a multiline string is one stdout event (python test_send_multiline_string_to_process)", async () => {
  const chunks = [];
  const cmd = await sbx.commands.run("cat", { background: true, stdin: true, onStdout: (d) => chunks.push(d) });
  await sbx.commands.sendStdin(cmd.pid, "Hello,\nWorld!");
  await until(() => chunks.join("").includes("World!"), 5000, `cat's stdout ${JSON.stringify(chunks)}`);
  await cmd.kill();
  assert.equal(chunks[0], "Hello,\nWorld!", JSON.stringify(chunks));
});

await check("sendStdin: send empty stdin to process", async () => {
  const cmd = await sbx.commands.run("cat", { background: true, stdin: true });
  await sbx.commands.sendStdin(cmd.pid, "");
  await cmd.kill();
  assert.equal(cmd.stdout, "");
});

await check("closeStdin: cat ends on end of input", async () => {
  const cmd = await sbx.commands.run("cat", { background: true, stdin: true });
  await sbx.commands.sendStdin(cmd.pid, "a line\n");
  await sbx.commands.closeStdin(cmd.pid);
  const res = await cmd.wait();
  assert.equal(res.exitCode, 0);
  assert.equal(res.stdout, "a line\n");
});

await check("a command started without stdin reads an empty one and refuses input", async () => {
  const res = await sbx.commands.run("cat; echo end");
  assert.equal(res.stdout, "end\n");
  const cmd = await sbx.commands.run("sleep 30", { background: true });
  const why = await rejects(sbx.commands.sendStdin(cmd.pid, "x"), undefined, "sendStdin without stdin");
  assert.match(why, /without stdin/);
  await cmd.kill();
  return why;
});

await check("a plain kill (SIGTERM) ends a background sleep", async () => {
  const res = await sbx.commands.run("sleep 100 & p=$!; kill $p; wait $p; echo status $?");
  assert.equal(res.stdout, "status 143\n");
});

await check("pty: create, send input (ptyCreate, sendInput)", async () => {
  let output = "";
  const dec = new TextDecoder();
  const terminal = await sbx.pty.create({ cols: 80, rows: 24, envs: { ABC: "123" }, onData: (d) => (output += dec.decode(d)) });
  await sbx.pty.sendInput(terminal.pid, enc.encode("echo $ABC; tty\n"));
  await until(() => output.includes("/dev/pts/0"), 10000, `the terminal's output ${JSON.stringify(output)}`);
  await sbx.pty.sendInput(terminal.pid, enc.encode("exit\n"));
  const res = await terminal.wait();
  assert.equal(res.exitCode, 0);
  assert.match(output, /123/);
});

await check("pty: resize reaches the program (resize, stty size)", async () => {
  let output = "";
  const dec = new TextDecoder();
  const terminal = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => (output += dec.decode(d)) });
  await sbx.pty.sendInput(terminal.pid, enc.encode("stty size; tput cols\n"));
  await until(() => /24 80/.test(output), 10000, `stty size before: ${JSON.stringify(output)}`);
  await sbx.pty.resize(terminal.pid, { cols: 100, rows: 30 });
  output = "";
  await sbx.pty.sendInput(terminal.pid, enc.encode("stty size; tput cols; exit\n"));
  await terminal.wait();
  assert.match(output, /30 100/);
  assert.match(output, /\b100\b/);
});

await check("pty: a client whose terminal reports no size (0x0) gets 80x24", async () => {
  let output = "";
  const dec = new TextDecoder();
  const terminal = await sbx.pty.create({ cols: 0, rows: 0, onData: (d) => (output += dec.decode(d)) });
  await sbx.pty.sendInput(terminal.pid, enc.encode("stty size; exit\n"));
  await terminal.wait();
  assert.match(output, /24 80/);
});

await check("pty: kill (kill PTY, kill non-existing PTY)", async () => {
  const terminal = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} });
  await sbx.pty.sendInput(terminal.pid, enc.encode("sleep 1000 &\n"));
  assert.equal(await sbx.pty.kill(terminal.pid), true);
  await until(async () => !(await sbx.commands.list()).some((p) => p.pid === terminal.pid), 5000, "the killed terminal is still listed");
  assert.equal(await sbx.pty.kill(999999), false);
});

await finish();

// Latency of codecage's E2B-compatible surface as the official code-interpreter
// SDK sees it: Sandbox.create() + the first runCode('1+1'), sequentially, each
// sandbox killed afterwards. Same env as test.mjs (E2B_API_URL,
// E2B_SANDBOX_URL, E2B_API_KEY). Optional: E2B_LATENCY_ITERATIONS (default 10).
// Prints one line.
import assert from "node:assert/strict";
import { Sandbox } from "@e2b/code-interpreter";

const n = Number(process.env.E2B_LATENCY_ITERATIONS || 10);
const total = [];
const create = [];
const run = [];

for (let i = 0; i < n; i++) {
  const t0 = performance.now();
  const sbx = await Sandbox.create();
  const t1 = performance.now();
  try {
    const ex = await sbx.runCode("1+1");
    const t2 = performance.now();
    assert.equal(ex.text, "2", `runCode('1+1') gave ${JSON.stringify(ex.text)} ${JSON.stringify(ex.error)}`);
    create.push(t1 - t0);
    run.push(t2 - t1);
    total.push(t2 - t0);
  } finally {
    await sbx.kill();
  }
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const ms = (x) => Math.round(x);
console.log(
  `e2b latency: create+first runCode over ${n}: min ${ms(Math.min(...total))} ms, median ${ms(median(total))} ms, ` +
    `max ${ms(Math.max(...total))} ms (E2B publishes ~150 ms per sandbox start); ` +
    `median create ${ms(median(create))} ms, median first runCode ${ms(median(run))} ms`,
);

// Small assertions shared by the client drivers: each throws an Error whose
// message is the one-line reason the runner prints for a failing step.
export function expect(cond, what) {
  if (!cond) throw new Error(what);
}

export function expectIncludes(got, want, what) {
  const s = typeof got === "string" ? got : got instanceof Uint8Array ? new TextDecoder().decode(got) : JSON.stringify(got);
  if (!s?.includes(want)) throw new Error(`${what}: want ${JSON.stringify(want)}, got ${JSON.stringify(s?.slice(0, 160))}`);
  return s;
}

// need returns ctx[key] or fails the step because an earlier one did.
export function need(ctx, key) {
  if (ctx[key] === undefined) throw new Error(`no ${key}: an earlier step failed`);
  return ctx[key];
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// eventually retries fn until it returns without throwing or ms pass.
export async function eventually(fn, ms = 5000) {
  const end = Date.now() + ms;
  for (;;) {
    try {
      return await fn();
    } catch (e) {
      if (Date.now() > end) throw e;
      await sleep(250);
    }
  }
}

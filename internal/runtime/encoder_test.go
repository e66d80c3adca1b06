package runtime

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// harnessPython runs script after the harness's own definitions (the
// harness as it ships, without its start), and returns what it printed.
func harnessPython(tb testing.TB, script string) string {
	tb.Helper()
	i := strings.LastIndex(harnessSource, "\n_harness()")
	if i < 0 {
		tb.Fatal("the harness source does not end by starting the harness")
	}
	argv := Argv("")
	argv[harnessArg] = harnessSource[:i] + "\n" + script
	cmd := exec.Command(argv[0], argv[1:]...)
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		tb.Fatalf("python: %v\n%s", err, msg)
	}
	return string(out)
}

// The encoders give what repr and json.dumps give, cut at the limit:
// random nests of the plain types (the C runs and the item-by-item path
// both), recursion, subclasses, a broken __repr__.
func TestEncodersAgreeWithReprAndJSON(t *testing.T) {
	out := harnessPython(t, `
import json, random
random.seed(36)
LEAVES = [0, -5, 10**30, 1.5, -2.25e-300, 1e300, True, False, None, "", "a'b", 'a"b', "x\n\t\x01\xe9\u2028\udc80",
          "'\"", "y" * 50, b"a'b", b'\x00"', bytearray(b"q'"), bytearray(b"q'\""), ("t",), (), set(), frozenset({1}), {1, 2}, float("nan")]
def value(d=0):
    r = random.random()
    if d > 3 or r < 0.5:
        return random.choice(LEAVES)
    if r < 0.7:
        return [value(d + 1) for _ in range(random.randint(0, 1500 if d == 0 else 6))]
    if r < 0.8:
        return tuple(value(d + 1) for _ in range(random.randint(0, 6)))
    if r < 0.9:
        return {random.choice(["k", "q'", 'x"']) + str(i): value(d + 1) for i in range(random.randint(0, 6))}
    return {(1, 2): value(d + 1), 3: "x"}
bad = []
def check(what, got, want):
    if got != want and len(bad) < 5:
        i = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]), min(len(got), len(want)))
        bad.append("%s: at %d got %r, want %r" % (what, i, got[max(0, i - 30):i + 30], want[max(0, i - 30):i + 30]))
def cut(text, limit):
    return text if len(text) <= limit else text[:limit] + "... [truncated]"
l = [1]; l.append(l); d = {}; d["a"] = d; t = ([],); t[0].append(t)
class L(list): pass
class D(dict): pass
class S(str): pass
fixed = [l, d, t, [l, d], L([1, "x"]), D(a=1), S("a'b" * 10), {1: [2, (3,)]}, [[]] * 3, "\xe9\x00\U0001f600"]
for n in range(600):
    v = value() if n >= len(fixed) else fixed[n]
    full = repr(v)
    for limit in (0, 1, 7, 50, 1000, 10**8):
        check("repr %d" % limit, _repr(v, limit), cut(full, limit))
    if n < len(fixed):
        continue  # int keys, subclasses: json.dumps takes them, the result is their repr
    try:
        want = json.dumps(v, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        want = None
    for limit in (0, 5, 100, 5000, 10**8):
        try:
            got = _json(v, limit)
        except _TooBig:
            got = "TooBig"
        except (TypeError, ValueError):
            got = None
        if want is None:
            if got is not None and (got != "TooBig" or limit == 10**8):
                bad.append("json %d: %r encoded as %r" % (limit, repr(v)[:80], got[:80]))
        else:
            check("json %d" % limit, got, want if len(want) <= limit else "TooBig")
class Bad:
    def __repr__(self):
        raise RuntimeError("boom")
check("broken repr", _repr([Bad()], 100), "<unrepresentable list: boom>")
print("\n".join(bad) or "ok")
`)
	if strings.TrimSpace(out) != "ok" {
		t.Fatalf("the encoders disagree with repr or json.dumps:\n%s", out)
	}
}

// Encoding a result or a display bundle costs memory of the order of its
// limit, whatever the value's size: measured by tracemalloc around each
// call. (A 16 MiB string once cost a list of 16M entries, then its whole
// repr.)
func TestEncodersMemoryIsBoundedByTheLimit(t *testing.T) {
	out := harnessPython(t, `
import json, tracemalloc
s = "y" * (16 << 20)
values = {
    "str": s, "str with quotes": "'" * (16 << 20), "bytes": s.encode(), "bytearray": bytearray(s.encode()),
    "list of str": [1, s], "dict of str": {"k": s}, "tuple of str": ("x", s), "ints": list(range(2 << 20)),
    "dict of ints": {i: i for i in range(1 << 20)}, "set": set(range(1 << 20)), "records": [{"a": i, "b": [i, "x"]} for i in range(1 << 19)],
    "nested": [[list(range(1000))] * 1000] * 10,
}
_encode_result([1, "x"], 100)  # loads _json: not part of any one value's cost
tracemalloc.start()
peaks = {}
for name, v in values.items():
    for what, f in (("result", _encode_result), ("display", _display)):
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        out = f(v, 65536)
        text = out[0] if what == "result" else out["text/plain"]
        if not text.endswith("... [truncated]") or len(text) > 65536 + 20:
            raise SystemExit("%s %s: %d characters, not cut: %r" % (name, what, len(text), text[-50:]))
        peaks[name + " " + what] = tracemalloc.get_traced_memory()[1] - before
print(json.dumps(peaks))
`)
	var peaks map[string]int64
	if err := json.Unmarshal([]byte(out), &peaks); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for name, peak := range peaks {
		t.Logf("%s: %d KiB", name, peak>>10)
		if peak > 2<<20 {
			t.Errorf("encoding %s cost %d KiB, for a 64 KiB limit", name, peak>>10)
		}
	}
}

// The result encoder against json.dumps, on values that fit (its speed
// where both make the same text) and on values far past the limit (where
// json.dumps makes all of it). Run with -benchtime=1x: the Python side
// times itself (CPU time), best of interleaved rounds, and reports
// microseconds.
func BenchmarkResultEncoder(b *testing.B) {
	for range b.N {
		out := harnessPython(b, `
import json, time
def per_call(f, n):
    # CPU time, not wall time: the machine may be shared.
    t0 = time.process_time()
    for _ in range(n):
        f()
    return (time.process_time() - t0) / n
def best(a, b, rounds=9):
    n = max(1, int(0.02 / max(per_call(a, 1), 1e-6)))
    ta = tb = 1e9
    for _ in range(rounds):
        ta, tb = min(ta, per_call(a, n)), min(tb, per_call(b, n))
    return ta, tb
fits = {
    "ints": list(range(10000)), "floats": [i * 0.37 for i in range(5000)], "numbers with None": [None if i % 3 == 0 else i for i in range(10000)],
    "strs": ["item %d" % i for i in range(5000)], "records": [{"id": i, "name": "n%d" % i, "score": i * 0.5, "tags": ["a", "b"]} for i in range(1000)],
    "dict": {"k%d" % i: i for i in range(5000)}, "text": "h\xe9llo \"w\"\n" * 6000,
}
rows = []
for name, v in fits.items():
    dumps = lambda: json.dumps(v, separators=(",", ":"), ensure_ascii=False)
    assert _json(v, 1 << 20) == dumps()
    tj, te = best(dumps, lambda: _encode_result(v, 1 << 20))
    rows.append([name + " (fits)", tj * 1e6, te * 1e6])
for name, v in {"str 50 MiB": "y" * (50 << 20), "ints 2M": list(range(2 << 20))}.items():
    tj, te = best(lambda: json.dumps(v), lambda: _encode_result(v, 65536), 3)
    rows.append([name + " (cut at 64 KiB)", tj * 1e6, te * 1e6])
print(json.dumps(rows))
`)
		var rows [][3]any
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
		for _, r := range rows {
			b.Logf("%-26s json.dumps %10.1f µs   encoder %10.1f µs   ratio %.2f", r[0], r[1], r[2], r[2].(float64)/r[1].(float64))
		}
	}
}

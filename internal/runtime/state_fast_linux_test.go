package runtime

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// A state of builtin data only is saved by the C pickler, without
// importing cloudpickle (40-70 ms of CPU in a fresh session), and restored
// the same way: judged from the harnesses' own modules after each. Data
// and sharing come through as with cloudpickle; a state with a function
// still loads cloudpickle and comes through too.
func TestStatePlainDataSkipsCloudpickle(t *testing.T) {
	src := startHarness(t)
	run(t, src, Request{Code: `
import math
n, f, c, s, b, ba, none = 41, 0.5, 1 + 2j, "text", b"\x00\xff", bytearray(b"ab"), None
shared = [1, {"k": (2, 3)}, {4, 5}, frozenset({6})]
alias = shared
`})
	var buf bytes.Buffer
	rep, err := SaveState(src, &buf, StateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.LostCount != 0 {
		t.Fatalf("lost %+v", rep.Lost)
	}
	const probe = "import sys\n'cloudpickle' in sys.modules"
	if got := string(run(t, src, Request{Code: probe}).Result); got != "false" {
		t.Fatalf("cloudpickle loaded by the snapshot of plain data: %s", got)
	}
	dst := startHarness(t)
	if _, err := LoadState(dst, &buf, StateOptions{AllowedImports: []string{"math", "sys"}}); err != nil {
		t.Fatal(err)
	}
	check := "(n, f, [c.real, c.imag], s, list(b), list(ba), none, alias is shared, shared[1]['k'], sorted(shared[2]), sorted(shared[3]), math.floor(2.5))"
	want := `[41,0.5,[1.0,2.0],"text",[0,255],[97,98],null,true,[2,3],[4,5],[6],2]`
	if got := string(run(t, dst, Request{Code: check}).Result); got != want {
		t.Fatalf("restored: %s, want %s", got, want)
	}
	if got := string(run(t, dst, Request{Code: probe}).Result); got != "false" {
		t.Fatalf("cloudpickle loaded by the restore of plain data: %s", got)
	}

	// A function in the state: cloudpickle's pickler, as before.
	run(t, src, Request{Code: "def inc(v):\n    return v + n"})
	buf.Reset()
	if _, err := SaveState(src, &buf, StateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := string(run(t, src, Request{Code: probe}).Result); got != "true" {
		t.Fatalf("a state with a function saved without cloudpickle: %s", got)
	}
	dst2 := startHarness(t)
	if _, err := LoadState(dst2, &buf, StateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := string(run(t, dst2, Request{Code: "(inc(1), alias is shared)"}).Result); got != "[42,true]" {
		t.Fatalf("restored with a function: %s", got)
	}
}

// The plain check and the plain pickler, in state.py itself: exact
// builtin types only (a subclass, a function in a list, a structure too
// large to walk are not plain), and an object that is not plain met while
// pickling (a thread changed the state after the check) fails the value
// (it is named lost) instead of being saved by reference.
func TestStatePlainCheckAndGuard(t *testing.T) {
	code := stateSource + `
import io
class D(dict):
    pass
def fn():
    pass
cases = {
    "data": _plain([1, "a", [1, (2, {3: b"x"})], {4}, frozenset(), None, 1.5, 2j, bytearray()]),
    "subclass": _plain([D()]),
    "function": _plain([[fn]]),
    "module": _plain([io]),
    "too large": _plain([list(range(PLAIN_WALK + 1))]),
}
cyclic = []
cyclic.append(cyclic)
cases["cyclic"] = _plain([cyclic])
try:
    _plain_pickler(io.BytesIO()).dump([1, fn])
    cases["guard"] = "saved"
except _NotPlain as e:
    cases["guard"] = str(e)
print(cases)
`
	out, err := exec.Command("/usr/bin/python3", "-I", "-S", "-B", "-c", code).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := "{'data': True, 'subclass': False, 'function': False, 'module': False, 'too large': False, 'cyclic': False, 'guard': 'it changed while the snapshot was taken (a function appeared in it)'}"
	if got := strings.TrimSpace(string(out)); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

package fleet

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/runtime"
)

// nativeFleet is a fleet of real native jails.
func nativeFleet(t testing.TB) *Fleet {
	t.Helper()
	f := New(Config{MaxSandboxes: 4, Starters: map[string]Starter{Native: NativeStarter{}}})
	t.Cleanup(f.Close)
	return f
}

// startSession starts a session's sandbox (the harness kept alive, numpy
// and pandas visible) on a workspace of its own.
func startSession(t testing.TB, f *Fleet) *Lease {
	t.Helper()
	ws, site := t.TempDir(), t.TempDir()
	work := Work{Kind: Session, ID: NewID(), Interpreter: runtime.DefaultInterpreter, Workspace: ws, Site: site,
		Limits: Caps{}.Run(Need{Timeout: time.Minute, CPUTime: time.Minute, Memory: 1 << 30, Output: 1 << 20}), Lifetime: 10 * time.Minute, DataScience: true}
	l, err := f.Start(context.Background(), Native, work.Spec())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	if err := os.Chown(ws, l.HostUID(), l.HostUID()); err != nil {
		t.Fatal(err)
	}
	return l
}

// runOK runs code in the session's context ctx and returns its result.
func runOK(t testing.TB, l *Lease, ctx, code string) string {
	t.Helper()
	l.Arm(context.Background(), time.Minute, time.Minute)
	o := l.Run(runtime.Request{Code: code, KeepAlive: true, MaxResultBytes: 1 << 16, Context: ctx}, nil, nil)
	if o.Reply == nil {
		t.Fatalf("no reply to %q (exit %+v, stderr %q)", code, o.Exit, o.Stderr)
	}
	if o.Reply.Error != nil {
		t.Fatalf("%q: %s", code, o.Reply.Error.Traceback)
	}
	return string(o.Reply.Result)
}

// The session's state of issue #26: data, a DataFrame, a function, a
// lambda, a class and its instance, a module under an alias, and what
// pickling cannot keep (a generator, an open socket).
const richState = `
import numpy as np, pandas as pd, socket
n = 200_000
rows = pd.DataFrame({"a": np.arange(n), "b": np.arange(n) * 0.5, "c": ["x%d" % (i % 100) for i in range(n)]})
scale = 3
def scaled(v): return v * scale
double = lambda v: 2 * v
class Point:
    def __init__(self, x, y): self.x, self.y = x, y
    def norm2(self): return self.x ** 2 + self.y ** 2
p = Point(3, 4)
same = [1, 2, 3]
alias = same
gen = (i for i in range(10))
sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
`

func lostNames(rep *StateReport) map[string]string {
	m := map[string]string{}
	for _, g := range rep.Lost {
		m[g.Context+"."+g.Name] = g.Reason
	}
	return m
}

// A snapshot into a file, restored into a new sandbox, brings back every
// global and every context, except the generator and the socket, which
// both reports name with why.
func TestStateSurvivesSnapshotAndRestore(t *testing.T) {
	f := nativeFleet(t)
	src := startSession(t, f)
	runOK(t, src, "", richState)
	runOK(t, src, "b", "import os; os.makedirs('sub'); os.chdir('sub'); y = 7\ndef plus(v): return v + y")

	path := filepath.Join(t.TempDir(), "state")
	saved, err := src.SnapshotStateFile(path, StateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Size() != saved.Bytes || saved.Bytes < 1<<20 {
		t.Fatalf("file %v (%v), report says %d bytes", fi, err, saved.Bytes)
	}
	want := map[string]string{".gen": "generator", ".sock": "socket"}
	if lost := lostNames(saved); len(lost) != len(want) || saved.LostCount != len(want) {
		t.Fatalf("snapshot lost %v, want %v", lost, want)
	}
	for k, why := range want {
		if !strings.Contains(lostNames(saved)[k], why) {
			t.Fatalf("snapshot: %s lost for %q, want a reason naming %q", k, lostNames(saved)[k], why)
		}
	}

	dst := startSession(t, f)
	runOK(t, dst, "", "import os; os.makedirs('sub')") // as a copy of the workspace would have it
	restored, err := dst.RestoreStateFile(path, StateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if restored.Count != saved.Count || len(restored.Contexts) != 2 {
		t.Fatalf("restored %d globals in %v, saved %d", restored.Count, restored.Contexts, saved.Count)
	}
	for k, why := range want {
		if !strings.Contains(lostNames(restored)[k], why) {
			t.Fatalf("restore: %s reported as %q, want a reason naming %q", k, lostNames(restored)[k], why)
		}
	}
	// Functions see the context's later assignments (they are rebuilt on
	// its globals, not on a copy).
	got := runOK(t, dst, "", `scale = 10
[len(rows), int(rows["a"].sum()), float(rows["b"].iloc[-1]), rows["c"].iloc[123], scaled(2), double(21),
 p.norm2(), isinstance(p, Point), type(p).__name__, np.__name__, pd.__name__, alias is same,
 "gen" in globals(), "sock" in globals()]`)
	wantGot := `[200000,19999900000,99999.5,"x23",20,42,25,true,"Point","numpy","pandas",true,false,false]`
	if got != wantGot {
		t.Fatalf("restored state:\n got  %s\n want %s", got, wantGot)
	}
	if got := runOK(t, dst, "b", "import os; (plus(1), os.getcwd(), 'rows' in globals())"); got != `[8,"/workspace/sub",false]` {
		t.Fatalf("context b: %s", got)
	}
}

// A snapshot over the size cap fails with a clear error, leaves no file
// (nor a partial one), and the session answers with its state intact.
func TestStateOverCapFailsCleanly(t *testing.T) {
	f := nativeFleet(t)
	l := startSession(t, f)
	runOK(t, l, "", "blob = bytes(8 << 20); x = 1")
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	_, err := l.SnapshotStateFile(path, StateOptions{MaxBytes: 1 << 20})
	if !errors.Is(err, ErrStateTooLarge) {
		t.Fatalf("snapshot over the cap: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a failed snapshot left %v", entries)
	}
	if got := runOK(t, l, "", "(x, len(blob))"); got != "[1,8388608]" {
		t.Fatalf("after the failed snapshot: %s", got)
	}
	// And the next snapshot, under a cap it fits, works.
	var buf bytes.Buffer
	if rep, err := l.SnapshotState(&buf, StateOptions{}); err != nil || rep.Bytes != int64(buf.Len()) || rep.Bytes < 8<<20 {
		t.Fatalf("snapshot after: %v, %+v", err, rep)
	}
}

// Garbage given to a restore is refused by the harness, inside the
// sandbox, with a clear reason; the supervisor only copies the bytes (no
// Go package of the module decodes a pickle). The session goes on, its
// contexts as they were.
func TestStateGarbageRefusedInsideSandbox(t *testing.T) {
	f := nativeFleet(t)
	l := startSession(t, f)
	runOK(t, l, "", "x = 5")
	junk := make([]byte, 1<<20)
	_, _ = rand.Read(junk)
	cases := map[string][]byte{
		"random bytes":         junk,
		"empty":                nil,
		"a header, then junk":  append([]byte("codecage-state 1\n"), junk[:4096]...),
		"a truncated snapshot": nil, // filled below
	}
	var good bytes.Buffer
	if _, err := l.SnapshotState(&good, StateOptions{}); err != nil {
		t.Fatal(err)
	}
	cases["a truncated snapshot"] = good.Bytes()[:good.Len()-3]
	for name, data := range cases {
		_, err := l.RestoreState(bytes.NewReader(data), StateOptions{})
		if !errors.Is(err, ErrStateRefused) {
			t.Fatalf("%s: %v", name, err)
		}
		t.Logf("%s: %v", name, err)
		if got := runOK(t, l, "", "x"); got != "5" {
			t.Fatalf("%s: after the refused restore x = %s", name, got)
		}
	}
	if _, err := l.RestoreState(bytes.NewReader(junk), StateOptions{}); !strings.Contains(err.Error(), "not a codecage session state") {
		t.Fatalf("random bytes: %v", err)
	}
}

// What the code can make expensive stays bounded: a deeply nested value
// is named as lost at once, a value whose pickling never ends (even one
// that catches the first interruption) ends at the time limit with a
// clear error, and a state of a great many globals saves and loads.
func TestStateBoundedInTime(t *testing.T) {
	f := nativeFleet(t)
	l := startSession(t, f)
	runOK(t, l, "", "deep = []\nfor _ in range(200_000): deep = [deep]\nok = 1")
	var buf bytes.Buffer
	start := time.Now()
	rep, err := l.SnapshotState(&buf, StateOptions{Timeout: 10 * time.Second})
	if err != nil || rep.LostCount != 1 || rep.Lost[0].Name != "deep" || !strings.Contains(rep.Lost[0].Reason, "recursion") {
		t.Fatalf("deep nesting: %v %+v", err, rep)
	}
	t.Logf("deep nesting: %v, %q", time.Since(start), rep.Lost[0].Reason)

	runOK(t, l, "", `import time
class Stuck:
    def __reduce__(self):
        try:
            while True: time.sleep(1)
        except BaseException:
            while True: pass
stuck = Stuck()`)
	start = time.Now()
	_, err = l.SnapshotState(&buf, StateOptions{Timeout: 500 * time.Millisecond})
	if !errors.Is(err, ErrStateRefused) || !strings.Contains(err.Error(), "time limit") {
		t.Fatalf("stuck reduction: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the time limit of 0.5 s took %v", d)
	}
	if got := runOK(t, l, "", "del stuck, deep; ok"); got != "1" {
		t.Fatalf("after the time limit: %s", got)
	}

	runOK(t, l, "", "globals().update({'v%d' % i: i for i in range(200_000)})")
	buf.Reset()
	start = time.Now()
	rep, err = l.SnapshotState(&buf, StateOptions{Timeout: 20 * time.Second})
	if err != nil || rep.Count < 200_000 || len(rep.Globals) > 1000 {
		t.Fatalf("many globals: %v (count %d, listed %d)", err, rep.Count, len(rep.Globals))
	}
	saveTime := time.Since(start)
	l2 := startSession(t, f)
	start = time.Now()
	rep, err = l2.RestoreState(bytes.NewReader(buf.Bytes()), StateOptions{Timeout: 20 * time.Second})
	if err != nil || rep.Count < 200_000 {
		t.Fatalf("restore many globals: %v", err)
	}
	t.Logf("200k globals: %d bytes, saved in %v, restored in %v", buf.Len(), saveTime, time.Since(start))
	if got := runOK(t, l2, "", "v199999 + ok"); got != "200000" {
		t.Fatalf("restored many globals: %s", got)
	}
}

// Under gVisor the fleet does not pickle: the other path saves memory images.
func TestStateNotSupportedUnderGVisor(t *testing.T) {
	f, _, _ := newTestFleet(t, 2, time.Second)
	l, err := f.Start(context.Background(), GVisor, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.SnapshotState(&bytes.Buffer{}, StateOptions{}); !errors.Is(err, ErrStateNotSupported) {
		t.Fatalf("snapshot under gVisor: %v", err)
	}
	if _, err := l.RestoreState(strings.NewReader("x"), StateOptions{}); !errors.Is(err, ErrStateNotSupported) {
		t.Fatalf("restore under gVisor: %v", err)
	}
}

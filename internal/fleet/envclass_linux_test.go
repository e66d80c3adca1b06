package fleet

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/runtime"
)

// envClass is the class of a pooled sandbox from environment env (its
// root the host's, Root ""), preimporting json: a zygote's when the host
// has cgroups.
func envClass(env string, ready int) ClassSpec {
	w := Work{Kind: Pooled, Interpreter: runtime.DefaultInterpreter, Preimport: []string{"json"},
		Vars:   map[string]string{"ENV_MARK": env},
		Limits: Caps{CPUCores: 1}.Pooled(time.Minute, 10*time.Second, 256<<20)}
	return ClassSpec{Backend: Native, Name: "basic", Ready: ready, Zygote: true, Interpreter: runtime.DefaultInterpreter,
		Env: env, Spec: w.Spec()}
}

// envRun runs code in a sandbox of cs, taken from its class.
func envRun(t *testing.T, f *Fleet, cs ClassSpec, code string) string {
	t.Helper()
	l, ok, err := f.TakeIn(context.Background(), cs, cs.Spec.Limits)
	if !ok || err != nil {
		t.Fatalf("TakeIn %s: ok %v, %v", cs.Env, ok, err)
	}
	defer l.Release()
	o := l.Run(runtime.Request{Code: code, MaxResultBytes: 1 << 16}, nil, nil)
	if o.Reply == nil || o.Reply.Error != nil {
		t.Fatalf("%q: no result (exit %+v, stderr %q, reply %+v)", code, o.Exit, o.Stderr, o.Reply)
	}
	return string(o.Reply.Result)
}

// A run in an environment makes that environment's class at its first
// use (one per environment, each with its sandboxes' own start: here
// its variables and preimports), counted in Stats beside the static
// ones; a class unused for ClassIdle is closed, its ready sandboxes
// ended and their slots back in the budget; CloseClass closes one at
// once; a class kept none ready serves no run.
func TestEnvironmentClasses(t *testing.T) {
	f := New(Config{MaxSandboxes: 6, Starters: map[string]Starter{Native: NativeStarter{}}, ClassIdle: 6 * time.Second}) // each step of a loaded host may take seconds
	t.Cleanup(f.Close)
	a, b := envClass("sha256:aaaaaaaaaaaaaaaaaaaa", 1), envClass("sha256:bbbbbbbbbbbbbbbbbbbb", 1)
	code := "import os, sys; (os.environ.get('ENV_MARK'), 'json' in sys.modules)"
	if got := envRun(t, f, a, code); got != `["sha256:aaaaaaaaaaaaaaaaaaaa",true]` {
		t.Fatalf("run in a: %s", got)
	}
	if got := envRun(t, f, b, code); got != `["sha256:bbbbbbbbbbbbbbbbbbbb",true]` {
		t.Fatalf("run in b: %s", got)
	}
	envRun(t, f, a, "1") // a's class again, not a third
	keys := func() []string {
		var out []string
		for k := range f.Stats() {
			if strings.Contains(k, "@env:") {
				out = append(out, k)
			}
		}
		return out
	}
	if got := keys(); len(got) != 2 {
		t.Fatalf("environment classes %v, want one for each of a and b", got)
	}
	// Each keeps one ready: their sandboxes hold budget slots.
	waitUntil(t, "both classes refilled", func() bool {
		st := f.Stats()
		return st["basic@env:aaaaaaaaaaaa"].Ready == 1 && st["basic@env:bbbbbbbbbbbb"].Ready == 1
	})
	if held := f.Budget().InUse; held < 2 {
		t.Fatalf("budget holds %d slots with two ready sandboxes", held)
	}

	zygotes := map[string]*zygote{}
	f.mu.Lock()
	for k, dc := range f.dyn {
		zygotes[k.env] = dc.zygote
	}
	f.mu.Unlock()
	zygoteGone := func(env string) bool {
		z := zygotes[env]
		if z == nil {
			return true // no cgroups here: whole jails, no zygote
		}
		z.mu.Lock()
		defer z.mu.Unlock()
		return z.sb == nil
	}
	if zygotes[a.Env] != nil && zygoteGone(a.Env) {
		t.Fatal("a's zygote is not running")
	}

	// b is removed: its class goes at once, a's stays.
	f.CloseClass(b.Env)
	if !zygoteGone(b.Env) {
		t.Fatal("b's zygote outlived CloseClass")
	}
	if _, ok := f.Stats()["basic@env:bbbbbbbbbbbb"]; ok {
		t.Fatal("b's class outlived CloseClass")
	}
	if _, ok := f.Stats()["basic@env:aaaaaaaaaaaa"]; !ok {
		t.Fatal("a's class went with b's")
	}
	// a, unused, goes after ClassIdle; every slot comes back.
	deadline := time.Now().Add(30 * time.Second)
	for len(keys()) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if got := keys(); len(got) != 0 {
		t.Fatalf("idle environment classes not closed: %v", got)
	}
	waitUntil(t, "slots back", func() bool { return f.Budget().InUse == 0 })
	// The class leaves the fleet's map before its close ends its pool
	// (the slots) and then its zygote, so the zygote may still be going.
	waitUntil(t, "a's zygote gone after its idle class", func() bool { return zygoteGone(a.Env) })

	// A later run makes the class again.
	if got := envRun(t, f, a, code); got != `["sha256:aaaaaaaaaaaaaaaaaaaa",true]` {
		t.Fatalf("run in a, again: %s", got)
	}
	// No pool for an environment sized 0: the caller starts its own.
	if _, ok, err := f.TakeIn(context.Background(), envClass("sha256:cccccccccccccccccccc", 0), a.Spec.Limits); ok || err != nil {
		t.Fatalf("a class of size 0 served a run (ok %v, err %v)", ok, err)
	}
}

// An environment's layer is on the harness's sys.path after the
// session's own packages and before the operator's layer: a module in
// several is the first's.
func TestEnvironmentLayerOrder(t *testing.T) {
	base := t.TempDir()
	dir := func(name string, mods ...string) string {
		d := base + "/" + name
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, m := range mods {
			if err := os.WriteFile(d+"/"+m+".py", []byte("WHERE = "+strconv.Quote(name)+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	site, envLayer, packages := dir("site", "a"), dir("env", "a", "b"), dir("packages", "a", "b", "c")
	f := New(Config{MaxSandboxes: 2, Starters: map[string]Starter{Native: NativeStarter{}}})
	t.Cleanup(f.Close)
	work := Work{Kind: Session, ID: NewID(), Interpreter: runtime.DefaultInterpreter, Workspace: t.TempDir(), Site: site,
		EnvLayer: envLayer, Layer: []Bind{{Host: packages, Path: PackagesDir}},
		Limits: Caps{}.Run(Need{Timeout: time.Minute, CPUTime: time.Minute, Memory: 256 << 20, Output: 1 << 20}), Lifetime: time.Minute}
	l, err := f.Start(context.Background(), Native, work.Spec())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	_ = os.Chown(work.Workspace, l.HostUID(), l.HostUID())
	got := runOK(t, l, "", "import a, b, c; (a.WHERE, b.WHERE, c.WHERE)")
	if got != `["site","env","packages"]` {
		t.Fatalf("modules found in %s, want site, env, packages", got)
	}
}

package gvisor_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/gvisor"
	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/runtime"
)

// harness starts the harness in a gVisor sandbox on workspace ws (owned
// by uid) and waits until it is ready.
func harness(t testing.TB, rt gvisor.Runtime, ws string, uid int) *gvisor.Sandbox {
	t.Helper()
	if info := gvisor.Probe(gvisor.Runtime{}); !info.Available {
		t.Fatalf("gVisor does not work here: %s", info.Error)
	}
	sb, err := gvisor.Start(context.Background(), rt, harnessSpec(ws, uid))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { sb.Kill(jail.LimitNone); sb.Wait(); sb.Channel().Close() })
	if err := runtime.ReadReady(sb.Channel()); err != nil {
		t.Fatalf("the harness is not ready: %v %s", err, sb.Log())
	}
	return sb
}

func harnessSpec(ws string, uid int) jail.Spec {
	return jail.Spec{
		Argv: runtime.Argv(""), Env: runtime.Env(), Workspace: ws, HostUID: uid,
		Limits: jail.Limits{Timeout: 5 * time.Minute, CPUTime: 5 * time.Minute, MemoryBytes: 512 << 20},
	}
}

// restore restores imageDir on workspace ws.
func restore(t testing.TB, rt gvisor.Runtime, imageDir, ws string) *gvisor.Sandbox {
	t.Helper()
	spec := harnessSpec(ws, 0)
	spec.Argv, spec.Env = nil, nil
	sb, err := gvisor.Restore(context.Background(), rt, imageDir, spec)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	t.Cleanup(func() { sb.Kill(jail.LimitNone); sb.Wait(); sb.Channel().Close() })
	return sb
}

// ask runs code in the harness and returns its result as JSON text, or
// fails with the error the code raised.
func ask(t testing.TB, sb *gvisor.Sandbox, code string) string {
	t.Helper()
	_ = sb.Channel().SetDeadline(time.Now().Add(60 * time.Second))
	a := runtime.Exchange(sb.Channel(), runtime.Request{Code: code, KeepAlive: true, MaxResultBytes: 1 << 20}, nil)
	if a.Reply == nil {
		sb.Kill(jail.LimitNone)
		e := sb.Wait()
		t.Fatalf("no reply to %q: exit %+v, log %s", code, e, sb.Log())
	}
	if a.Reply.Error != nil {
		t.Fatalf("%q raised %s: %s", code, a.Reply.Error.Type, a.Reply.Error.Traceback)
	}
	return string(a.Reply.Result)
}

// sandboxWorkspace is a workspace directory the sandbox's uid owns.
func sandboxWorkspace(t testing.TB, uid int) string {
	t.Helper()
	ws := t.TempDir()
	if err := os.Chown(ws, uid, uid); err != nil {
		t.Fatal(err)
	}
	return ws
}

func reserveUID(t testing.TB) int {
	t.Helper()
	uid, err := jail.ReserveUID()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { jail.ReleaseUID(uid) })
	return uid
}

// The state a session builds: a variable, a function, a class, a
// generator half consumed, and a workspace file held open.
const sessionState = `
x = 41
def f(a): return a + 1
class C:
    def __init__(self): self.v = 'c'
def gen():
    i = 0
    while True:
        yield i
        i += 1
g = gen(); next(g); next(g)
fh = open('/workspace/log.txt', 'w+'); fh.write('before\n'); fh.flush()
`

// After a checkpoint that ends the sandbox and a restore, every piece of
// the session's state is intact, the restored code writes files as the
// image's uid, and the old sandbox and every bundle and mount are gone.
func TestCheckpointRestoreKeepsState(t *testing.T) {
	uid := reserveUID(t)
	state := t.TempDir()
	rt := gvisor.Runtime{StateDir: state}
	ws := sandboxWorkspace(t, uid)
	sb := harness(t, rt, ws, uid)
	ask(t, sb, sessionState)
	img := filepath.Join(t.TempDir(), "img")
	m, err := sb.Checkpoint(context.Background(), img, false)
	if err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	select {
	case <-sb.Done():
	default:
		t.Fatal("the sandbox runs on after a checkpoint without leave-running")
	}
	if m.UID != uid || m.Bytes == 0 || m.RunscVersion == "" || m.Platform == "" {
		t.Fatalf("manifest %+v", m)
	}
	if left := bundles(t, state); len(left) != 0 {
		t.Fatalf("the checkpointed sandbox left %v", left)
	}
	if procs := cgroupProcs(sb.ID()); len(procs) != 0 {
		t.Fatalf("processes of the checkpointed sandbox live on: %v", procs)
	}
	r := restore(t, rt, img, ws)
	if r.HostUID() != uid || r.ID() == sb.ID() {
		t.Fatalf("restored as %s, uid %d; the image's is %d, of %s", r.ID(), r.HostUID(), uid, sb.ID())
	}
	if procs := cgroupProcs(r.ID()); len(procs) == 0 {
		t.Fatal("no process in the restored sandbox's cgroup")
	}
	got := ask(t, r, "import os; fh.write('after\\n'); fh.flush(); open('/workspace/new.txt', 'w').write('n'); [f(x), C().v, next(g), open('/workspace/log.txt').read(), x, os.getuid()]")
	if want := fmt.Sprintf(`[42,"c",2,"before\nafter\n",41,%d]`, uid); got != want {
		t.Fatalf("after restore: %s, want %s", got, want)
	}
	// Judged from the host: the files are the image's uid's.
	if b, _ := os.ReadFile(filepath.Join(ws, "log.txt")); string(b) != "before\nafter\n" {
		t.Fatalf("log.txt on the host: %q", b)
	}
	fi, err := os.Stat(filepath.Join(ws, "new.txt"))
	if err != nil || fileUID(fi) != uid {
		t.Fatalf("a file the restored code made: %v, uid %d, want %d", err, fileUID(fi), uid)
	}
	r.Kill(jail.LimitNone)
	r.Wait()
	if procs := cgroupProcs(r.ID()); len(procs) != 0 {
		t.Fatalf("processes of the restored sandbox outlive it: %v", procs)
	}
	if left := bundles(t, state); len(left) != 0 {
		t.Fatalf("left after the restored sandbox: %v", left)
	}
	if mounts := mountsUnder(t, state); len(mounts) != 0 {
		t.Fatalf("mounts left: %v", mounts)
	}
}

// cgroupProcs are the host processes in the cgroup of sandbox id (runsc,
// the Sentry, the Gofer: under gVisor no host process runs as the
// sandbox's uid; its files show it).
func cgroupProcs(id string) []string {
	entries, _ := os.ReadDir("/proc")
	var pids []string
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		if err == nil && strings.Contains(string(b), "gv-"+id) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// bundles lists what the state directory still holds.
func bundles(t testing.TB, state string) []string {
	t.Helper()
	entries, err := os.ReadDir(state)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// mountsUnder lists the host's mount points below dir.
func mountsUnder(t testing.TB, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && strings.HasPrefix(fields[4], dir) {
			out = append(out, fields[4])
		}
	}
	return out
}

// Two restores of one image (taken with leave-running) are two sandboxes:
// each writes its own workspace copy and keeps its own variables, and
// neither sees the other's, nor the original's later changes.
func TestRestoreTwiceForks(t *testing.T) {
	uid := reserveUID(t)
	rt := gvisor.Runtime{StateDir: t.TempDir()}
	ws := sandboxWorkspace(t, uid)
	sb := harness(t, rt, ws, uid)
	ask(t, sb, sessionState)
	img := filepath.Join(t.TempDir(), "img")
	if _, err := sb.Checkpoint(context.Background(), img, true); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	if got := ask(t, sb, "x = 'parent'; x"); got != `"parent"` {
		t.Fatalf("the original after a leave-running checkpoint: %s", got)
	}
	var forks [2]*gvisor.Sandbox
	var dirs [2]string
	for i := range forks {
		dirs[i] = copyWorkspace(t, ws, uid)
		forks[i] = restore(t, rt, img, dirs[i])
	}
	ask(t, forks[0], "x = 'a'; fh.write('a\\n'); fh.flush()")
	ask(t, forks[1], "x = 'b'; fh.write('b\\n'); fh.flush()")
	for i, want := range []string{`["a","before\na\n",2]`, `["b","before\nb\n",2]`} {
		if got := ask(t, forks[i], "[x, open('/workspace/log.txt').read(), next(g)]"); got != want {
			t.Fatalf("fork %d: %s, want %s", i, got, want)
		}
	}
	if got := ask(t, sb, "[x, open('/workspace/log.txt').read()]"); got != `["parent","before\n"]` {
		t.Fatalf("the original sees a fork: %s", got)
	}
}

// copyWorkspace copies a flat workspace directory (a fork's own copy).
func copyWorkspace(t testing.TB, ws string, uid int) string {
	t.Helper()
	dst := sandboxWorkspace(t, uid)
	entries, err := os.ReadDir(ws)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(ws, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dst, e.Name())
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// An image of another runsc build or platform, a missing image, a corrupt
// one: each refused with a clear error, and nothing left running or on
// disk.
func TestRestoreRefusesBadImages(t *testing.T) {
	uid := reserveUID(t)
	state := t.TempDir()
	rt := gvisor.Runtime{StateDir: state}
	ws := sandboxWorkspace(t, uid)
	sb := harness(t, rt, ws, uid)
	ask(t, sb, "x = 1")
	img := filepath.Join(t.TempDir(), "img")
	if _, err := sb.Checkpoint(context.Background(), img, true); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	edit := func(name string, change func(m map[string]any)) string {
		dir := filepath.Join(t.TempDir(), name)
		if err := os.CopyFS(dir, os.DirFS(img)); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(dir, gvisor.ManifestName))
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		change(m)
		b, _ = json.Marshal(m)
		if err := os.WriteFile(filepath.Join(dir, gvisor.ManifestName), b, 0o600); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	truncated := filepath.Join(t.TempDir(), "truncated")
	if err := os.CopyFS(truncated, os.DirFS(img)); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(truncated)
	for _, e := range entries {
		if e.Name() != gvisor.ManifestName {
			if err := os.Truncate(filepath.Join(truncated, e.Name()), 100); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range []struct {
		name, dir string
		want      error
		says      string
	}{
		{"another runsc", edit("runsc", func(m map[string]any) { m["runsc_version"] = "runsc version release-20221212.0" }), gvisor.ErrImageMismatch, "release-20221212.0"},
		{"another platform", edit("platform", func(m map[string]any) { m["platform"] = "kvm" }), gvisor.ErrImageMismatch, `"kvm" platform`},
		{"another format", edit("format", func(m map[string]any) { m["format"] = 99 }), gvisor.ErrBadImage, "format 99"},
		{"missing", filepath.Join(t.TempDir(), "none"), gvisor.ErrBadImage, "no such file"},
		{"corrupt", truncated, gvisor.ErrBadImage, "restore failed"},
	} {
		spec := harnessSpec(ws, 0)
		before := len(bundles(t, state))
		r, err := gvisor.Restore(context.Background(), rt, c.dir, spec)
		if err == nil {
			r.Kill(jail.LimitNone)
			e := r.Wait()
			t.Errorf("%s: restored; exit %+v log %s", c.name, e, r.Log())
			continue
		}
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want %v saying %q", c.name, err, c.want, c.says)
		}
		if n := len(bundles(t, state)); n != before {
			t.Errorf("%s: %d bundles left, %d before", c.name, n, before)
		}
	}
	if m := mountsUnder(t, state); len(m) > 2 { // the original's own
		t.Errorf("mounts left: %v", m)
	}
}

package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/gvisor"
	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/runtime"
)

// gvisorFleet is a fleet whose gVisor backend is the real one (the pinned
// runsc); it fails, never skips, where gVisor does not run.
func gvisorFleet(t testing.TB, max int) *Fleet {
	t.Helper()
	if info := gvisor.Probe(gvisor.Runtime{}); !info.Available {
		t.Fatalf("gVisor does not work here: %s", info.Error)
	}
	f := New(Config{MaxSandboxes: max, QueueTimeout: 5 * time.Second, Starters: map[string]Starter{
		GVisor: GVisorStarter{Runtime: gvisor.Runtime{StateDir: t.TempDir()}},
		Native: &fakeStarter{all: &liveCount{}},
	}})
	t.Cleanup(f.Close)
	return f
}

// sessionWork is a session's work on its own workspace and package
// directory, owned by uid.
func sessionWork(t testing.TB, uid int) Work {
	t.Helper()
	ws, site := t.TempDir(), t.TempDir()
	for _, d := range []string{ws, site} {
		if err := os.Chown(d, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	return Work{Kind: Session, ID: NewID(), Workspace: ws, Site: site, HostUID: uid,
		Limits: Caps{}.Run(Need{Memory: 512 << 20}), Lifetime: 5 * time.Minute}
}

// forkWork is w with a new id and a copy of its workspace.
func forkWork(t testing.TB, w Work) Work {
	t.Helper()
	f := w
	f.ID, f.Workspace = NewID(), t.TempDir()
	if err := os.CopyFS(f.Workspace, os.DirFS(w.Workspace)); err != nil {
		t.Fatal(err)
	}
	err := filepath.WalkDir(f.Workspace, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(p, w.HostUID, w.HostUID)
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func askLease(t testing.TB, l *Lease, code string) string {
	t.Helper()
	o := l.Run(runtime.Request{Code: code, KeepAlive: true, MaxResultBytes: 1 << 20}, nil, nil)
	if o.Reply == nil {
		t.Fatalf("no reply to %q: %+v", code, o)
	}
	if o.Reply.Error != nil {
		t.Fatalf("%q raised %s", code, o.Reply.Error.Traceback)
	}
	return string(o.Reply.Result)
}

func ownerUID(t testing.TB) int {
	t.Helper()
	uid, err := ReserveUID()
	if err != nil {
		t.Fatal(err)
	}
	return uid
}

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

// Pause and resume through the fleet: the pause ends the sandbox and
// gives its slot back; the image keeps the owner's uid after the owner
// lets go of it, until the image is deleted and the resumed sandbox gone;
// the resumed session has all its state.
func TestGVisorPauseResume(t *testing.T) {
	f := gvisorFleet(t, 2)
	uid := ownerUID(t)
	w := sessionWork(t, uid)
	l, err := f.Start(context.Background(), GVisor, w.Spec())
	if err != nil {
		t.Fatal(err)
	}
	askLease(t, l, sessionState)
	img := filepath.Join(t.TempDir(), "img")
	m, err := l.Checkpoint(context.Background(), img, false)
	if err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	if m.UID != uid {
		t.Fatalf("the image's uid %d, the session's %d", m.UID, uid)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("the paused sandbox runs on")
	}
	waitUntil(t, "the paused sandbox's slot back", func() bool { return f.Budget().InUse == 0 })

	// The owner lets go (its session is paused): the image holds the uid.
	ReleaseUID(uid)
	for range 64 {
		other, err := ReserveUID()
		if err != nil {
			t.Fatal(err)
		}
		defer ReleaseUID(other)
		if other == uid {
			t.Fatalf("the image's uid %d went to another owner", uid)
		}
	}

	w.ID = NewID()
	r, err := f.StartFromImage(context.Background(), img, w)
	if err != nil {
		t.Fatalf("StartFromImage: %v", err)
	}
	if r.HostUID() != uid || f.Budget().InUse != 1 {
		t.Fatalf("resumed as uid %d (want %d), budget %+v", r.HostUID(), uid, f.Budget())
	}
	got := askLease(t, r, "import os; fh.write('after\\n'); fh.flush(); open('/workspace/new.txt', 'w').write('n'); [f(x), C().v, next(g), open('/workspace/log.txt').read(), os.getuid()]")
	if want := fmt.Sprintf(`[42,"c",2,"before\nafter\n",%d]`, uid); got != want {
		t.Fatalf("resumed: %s, want %s", got, want)
	}
	if owner := fileOwner(t, filepath.Join(w.Workspace, "new.txt")); owner != uid {
		t.Fatalf("a file the resumed code wrote belongs to %d, not %d", owner, uid)
	}
	ReleaseUID(m.UID) // the image is deleted; the resumed sandbox still holds it
	if !uidHeld(uid) {
		t.Fatal("the uid was let go while a sandbox restored from its image runs")
	}
	r.Close()
	waitUntil(t, "the uid back to the host", func() bool { return !uidHeld(uid) })
	waitUntil(t, "every slot back", func() bool { return f.Budget().InUse == 0 })
}

// Fork: a snapshot that leaves the session running, then two sandboxes
// from it, each on its own copy of the workspace: they diverge, share the
// owner's uid, and hold a slot each.
func TestGVisorFork(t *testing.T) {
	f := gvisorFleet(t, 3)
	uid := ownerUID(t)
	defer ReleaseUID(uid)
	w := sessionWork(t, uid)
	l, err := f.Start(context.Background(), GVisor, w.Spec())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	askLease(t, l, sessionState)
	img := filepath.Join(t.TempDir(), "img")
	m, err := l.Checkpoint(context.Background(), img, true)
	if err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	defer ReleaseUID(m.UID)
	askLease(t, l, "x = 'parent'")
	var forks [2]*Lease
	var works [2]Work
	for i := range forks {
		works[i] = forkWork(t, w)
		if forks[i], err = f.StartFromImage(context.Background(), img, works[i]); err != nil {
			t.Fatalf("fork %d: %v", i, err)
		}
		defer forks[i].Close()
		if forks[i].HostUID() != uid {
			t.Fatalf("fork %d runs as %d, not the parent's %d", i, forks[i].HostUID(), uid)
		}
	}
	if b := f.Budget(); b.InUse != 3 {
		t.Fatalf("three sandboxes, budget %+v", b)
	}
	askLease(t, forks[0], "x = 'a'; fh.write('a\\n'); fh.flush()")
	askLease(t, forks[1], "x = 'b'; fh.write('b\\n'); fh.flush()")
	for i, want := range []string{`["a","before\na\n",2]`, `["b","before\nb\n",2]`} {
		if got := askLease(t, forks[i], "[x, open('/workspace/log.txt').read(), next(g)]"); got != want {
			t.Fatalf("fork %d: %s, want %s", i, got, want)
		}
		// From the host: each fork wrote its own copy only.
		if b, _ := os.ReadFile(filepath.Join(works[i].Workspace, "log.txt")); string(b) != "before\n"+string(rune('a'+i))+"\n" {
			t.Fatalf("fork %d's workspace on the host: %q", i, b)
		}
	}
	if got := askLease(t, l, "[x, open('/workspace/log.txt').read()]"); got != `["parent","before\n"]` {
		t.Fatalf("the parent: %s", got)
	}
}

// What cannot be saved or restored is refused with a clear error, and
// leaves no slot, uid hold or sandbox behind.
func TestGVisorImageRefusals(t *testing.T) {
	f := gvisorFleet(t, 2)
	nat, err := f.Start(context.Background(), Native, jail.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nat.Checkpoint(context.Background(), t.TempDir(), true); !errors.Is(err, ErrNoImages) || !strings.Contains(err.Error(), "not supported on the native backend") {
		t.Fatalf("a native checkpoint: %v", err)
	}
	nat.Close()

	// A sandbox of no owner's uid (a run's): its image could not keep it.
	run, err := f.Start(context.Background(), GVisor, Work{Kind: Run}.Spec())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Checkpoint(context.Background(), t.TempDir(), true); err == nil || !strings.Contains(err.Error(), "not an owner's") {
		t.Fatalf("a run's checkpoint: %v", err)
	}
	run.Close()

	uid := ownerUID(t)
	defer ReleaseUID(uid)
	w := sessionWork(t, uid)
	l, err := f.Start(context.Background(), GVisor, w.Spec())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	askLease(t, l, "x = 1")
	img := filepath.Join(t.TempDir(), "img")
	m, err := l.Checkpoint(context.Background(), img, true)
	if err != nil {
		t.Fatal(err)
	}
	defer ReleaseUID(m.UID)
	if _, err := l.Checkpoint(context.Background(), img, true); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("a checkpoint over an image: %v", err)
	}
	other := filepath.Join(t.TempDir(), "other")
	if err := os.CopyFS(other, os.DirFS(img)); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(other, gvisor.ManifestName))
	var man map[string]any
	_ = json.Unmarshal(b, &man)
	man["runsc_version"] = "runsc version release-20221212.0"
	b, _ = json.Marshal(man)
	if err := os.WriteFile(filepath.Join(other, gvisor.ManifestName), b, 0o600); err != nil {
		t.Fatal(err)
	}
	dataScience := forkWork(t, w)
	dataScience.DataScience = true
	for _, c := range []struct {
		name string
		dir  string
		w    Work
		want error
	}{
		{"another runsc", other, forkWork(t, w), ErrImageMismatch},
		{"other mounts", img, dataScience, ErrImageMismatch},
		{"missing", filepath.Join(t.TempDir(), "none"), forkWork(t, w), ErrBadImage},
	} {
		if _, err := f.StartFromImage(context.Background(), c.dir, c.w); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if b := f.Budget(); b.InUse != 1 {
			t.Errorf("%s: budget %+v", c.name, b)
		}
	}
	uidHolds.Lock()
	holds := uidHolds.n[uid]
	uidHolds.Unlock()
	if holds != 2 { // the owner and the image
		t.Fatalf("%d holds of the uid after refused restores, want 2", holds)
	}
}

func fileOwner(t testing.TB, path string) int {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return int(fi.Sys().(*syscall.Stat_t).Uid)
}

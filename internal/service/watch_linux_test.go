package service_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// inotifyUse counts, from the host, this process's inotify instances and
// the kernel watches they hold (/proc/self/fdinfo): what a watch costs
// the host, whatever the watch itself believes.
func inotifyUse(t *testing.T) (instances, watches int) {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if l, _ := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); l != "anon_inode:inotify" {
			continue
		}
		info, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", fd.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		instances++
		watches += strings.Count(string(info), "inotify wd:")
	}
	return instances, watches
}

// waitFor reads w until an event matches, or fails after d.
func waitEvent(t *testing.T, w *service.Watch, d time.Duration, want func(service.WatchEvent) bool) []service.WatchEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var seen []service.WatchEvent
	for {
		evs, err := w.Next(ctx)
		seen = append(seen, evs...)
		for _, e := range evs {
			if want(e) {
				return seen
			}
		}
		if err != nil {
			t.Fatalf("no matching event (%v); saw %d, the last: %v", err, len(seen), seen[max(0, len(seen)-10):])
		}
	}
}

func watchEv(name, typ string) func(service.WatchEvent) bool {
	return func(e service.WatchEvent) bool { return e.Name == name && e.Type == typ }
}

func watchService(t *testing.T, mut func(*config.Config)) *service.Service {
	cfg := service.LeanTestConfig()
	cfg.AllowedImports = []string{policy.AllImports}
	cfg.SessionPoolSize, cfg.GVisorSessionPoolSize = 0, 0
	cfg.MachinePoolSize = 0
	if mut != nil {
		mut(&cfg)
	}
	return newServiceWith(t, cfg)
}

func watchedSession(t *testing.T, svc *service.Service) string {
	t.Helper()
	info, err := svc.CreateSession(context.Background(), service.SessionRequest{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.CloseSession(context.Background(), info.ID, "o") })
	return info.ID
}

// A write by the session's code and one by its command are seen, from
// the host, by a watch of its workspace; one that is not recursive does
// not report a subdirectory's files, a recursive one does.
func TestWatchSeesCodeAndCommandWrites(t *testing.T) {
	svc := watchService(t, nil)
	id := watchedSession(t, svc)
	ctx := context.Background()
	w, err := svc.WatchDir(ctx, id, "o", ".", false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	rec, err := svc.WatchDir(ctx, id, "o", ".", true)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Stop()
	mustSucceed(t, run(t, svc, "import os; os.makedirs('sub', exist_ok=True); open('by_code.txt', 'w').write('x')", func(r *service.Request) { r.SessionID, r.Owner, r.AllowedImports = id, "o", nil }))
	waitEvent(t, w, 10*time.Second, watchEv("by_code.txt", service.WatchWrite))
	if r := runCmd(t, svc, service.CommandRequest{SessionID: id, Owner: "o", Command: "echo hi > by_cmd.txt && echo deep > sub/deep.txt"}); !r.Success {
		t.Fatalf("command: %+v", r)
	}
	seen := waitEvent(t, w, 10*time.Second, watchEv("by_cmd.txt", service.WatchWrite))
	waitEvent(t, rec, 10*time.Second, watchEv("sub/deep.txt", service.WatchWrite))
	// The flat watch reports in order: once it has reported a file made
	// after the deep one, it would have reported the deep one too.
	if r := runCmd(t, svc, service.CommandRequest{SessionID: id, Owner: "o", Command: "echo later > later.txt"}); !r.Success {
		t.Fatalf("command: %+v", r)
	}
	more := waitEvent(t, w, 10*time.Second, watchEv("later.txt", service.WatchWrite))
	for _, e := range append(seen, more...) {
		if strings.Contains(e.Name, "deep") {
			t.Fatalf("a watch that is not recursive reported %+v", e)
		}
	}
}

// As E2B: a missing path is not found, a file is not a directory.
func TestWatchRefusesMissingAndFiles(t *testing.T) {
	svc := watchService(t, nil)
	id := watchedSession(t, svc)
	ctx := context.Background()
	if _, err := svc.WatchDir(ctx, id, "o", "no_such_dir", false); !errors.Is(err, service.ErrFileNotFound) {
		t.Fatalf("a watch of a missing directory: %v, want ErrFileNotFound", err)
	}
	if _, err := svc.WriteFile(ctx, id, "o", "f.txt", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.WatchDir(ctx, id, "o", "f.txt", false); !errors.Is(err, service.ErrBadPath) {
		t.Fatalf("a watch of a file: %v, want ErrBadPath", err)
	}
	if _, err := svc.WatchDir(ctx, id, "o", "/etc", false); !errors.Is(err, service.ErrBadPath) {
		t.Fatalf("a watch of /etc: %v, want ErrBadPath", err)
	}
	if _, err := svc.WatchDir(ctx, id, "other-owner", ".", false); !errors.Is(err, service.ErrSessionNotFound) {
		t.Fatalf("another owner's watch: %v, want ErrSessionNotFound", err)
	}
}

// A hostile tree, built by the code while a recursive watch follows it:
// thousands of directories wide, hundreds deep, renamed in a loop, with
// links to /etc and to a host directory. Judged from the host: the
// server's kernel watches stay within SANDBOX_WATCH_MAX_DIRS, its heap
// does not grow with the tree, the watch says it is incomplete, a change
// in the host directory the link names is never an event, and every
// inotify instance is gone once the watch stops and the session closes.
func TestWatchHostileTreeIsBounded(t *testing.T) {
	const maxDirs = 200
	svc := watchService(t, func(c *config.Config) {
		c.WatchMaxDirs = maxDirs
		c.Timeout = 60 * time.Second
		c.MaxTimeout = 60 * time.Second
	})
	id := watchedSession(t, svc)
	ctx := context.Background()
	host := t.TempDir() // a host directory the code plants a link to
	inst0, _ := inotifyUse(t)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	w, err := svc.WatchDir(ctx, id, "o", ".", true)
	if err != nil {
		t.Fatal(err)
	}
	code := `
import os
os.symlink('/etc', 'etc_link')
os.symlink(` + strconv.Quote(host) + `, 'host_link')
for i in range(3000):
    os.mkdir('wide_%d' % i)
p = 'deep'
for i in range(300):
    os.mkdir(p)
    p += '/d'
for i in range(2000):
    os.rename('wide_1', 'wide_x') if i % 2 == 0 else os.rename('wide_x', 'wide_1')
os.mkfifo('fifo')
`
	mustSucceed(t, run(t, svc, code, func(r *service.Request) {
		r.SessionID, r.Owner, r.AllowedImports, r.Timeout = id, "o", nil, 60*time.Second
	}))
	// Meanwhile the host directory the link names changes.
	if err := os.WriteFile(filepath.Join(host, "host_secret"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	inst, watches := inotifyUse(t)
	t.Logf("from the host: %d inotify instance(s) of this watch, %d kernel watches", inst-inst0, watches)
	if inst-inst0 != 1 || watches > maxDirs+1 {
		t.Errorf("one watch of a hostile tree holds %d inotify instances and %d kernel watches; want 1 and at most %d", inst-inst0, watches, maxDirs+1)
	}
	// Nobody read while the tree grew: the watch kept WatchEvents of its
	// events and says it dropped the rest; it goes on after.
	var overflow bool
	seen := waitEvent(t, w, 20*time.Second, func(e service.WatchEvent) bool { return e.Type == service.WatchOverflow })
	mustSucceed(t, run(t, svc, "open('after.txt', 'w').write('x')", func(r *service.Request) { r.SessionID, r.Owner, r.AllowedImports = id, "o", nil }))
	more := waitEvent(t, w, 20*time.Second, watchEv("after.txt", service.WatchWrite))
	if len(seen) > service.WatchEvents+1 {
		t.Errorf("one read gave %d events, more than the %d a watch keeps", len(seen), service.WatchEvents)
	}
	for _, e := range append(seen, more...) {
		overflow = overflow || e.Type == service.WatchOverflow
		if strings.Contains(e.Name, "host_secret") || strings.HasPrefix(e.Name, "etc_link/") || strings.HasPrefix(e.Name, "host_link/") {
			t.Fatalf("an event through a link out of the workspace: %+v", e)
		}
	}
	if !overflow {
		t.Errorf("a tree of 3300 directories under a watch of %d: no overflow notice", maxDirs)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("heap: %d bytes before the watch, %d after the tree", before.HeapAlloc, after.HeapAlloc)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 64<<20 {
		t.Errorf("the server's heap grew by %d bytes following a hostile tree", grew)
	}
	w.Stop()
	if inst, watches := inotifyUse(t); inst != inst0 {
		t.Errorf("after Stop: %d inotify instances (%d watches) left; want %d", inst, watches, inst0)
	}
}

// A watch ends when its session pauses or closes, and frees its inotify
// instance then; a session has at most SANDBOX_SESSION_MAX_WATCHES.
func TestWatchEndsWithItsSession(t *testing.T) {
	svc := watchService(t, func(c *config.Config) { c.SessionMaxWatches = 2 })
	ctx := context.Background()
	inst0, _ := inotifyUse(t)
	id := watchedSession(t, svc)
	a, err := svc.WatchDir(ctx, id, "o", ".", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.WatchDir(ctx, id, "o", ".", false); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.WatchDir(ctx, id, "o", ".", false); !errors.Is(err, service.ErrTooLarge) {
		t.Fatalf("a third watch of a session with a limit of 2: %v, want ErrTooLarge", err)
	}
	if got := svc.OpenWatches(); got != 2 {
		t.Fatalf("%d watches open, want 2", got)
	}
	if _, err := svc.PauseSession(ctx, id, "o", service.PauseMode{KeepMemory: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Next(ctx); !errors.Is(err, service.ErrWatchEnded) {
		t.Fatalf("a watch of a paused session: %v, want ErrWatchEnded", err)
	}
	if inst, _ := inotifyUse(t); inst != inst0 || svc.OpenWatches() != 0 {
		t.Fatalf("after the pause: %d inotify instances (want %d), %d watches open", inst, inst0, svc.OpenWatches())
	}
	if _, _, err := svc.ResumeSession(ctx, id, "o"); err != nil {
		t.Fatal(err)
	}
	b, err := svc.WatchDir(ctx, id, "o", ".", false)
	if err != nil {
		t.Fatalf("a watch after the resume: %v", err)
	}
	if err := svc.CloseSession(ctx, id, "o"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Next(ctx); !errors.Is(err, service.ErrWatchEnded) {
		t.Fatalf("a watch of a closed session: %v, want ErrWatchEnded", err)
	}
	if inst, _ := inotifyUse(t); inst != inst0 || svc.OpenWatches() != 0 {
		t.Fatalf("after the close: %d inotify instances (want %d), %d watches open", inst, inst0, svc.OpenWatches())
	}
}

// An upload renames its file into place (all or nothing); a watch reports
// it as envd's in-place write: create, chmod (its chown), write for a new
// file; write (the truncation), chmod, write for one it replaces; no write
// for an empty file. The temporary name is never seen.
func TestWatchReportsAnUploadAsEnvdsWrite(t *testing.T) {
	svc := watchService(t, nil)
	id := watchedSession(t, svc)
	ctx := context.Background()
	w, err := svc.WatchDir(ctx, id, "o", ".", true)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	upload := func(p, content string) {
		t.Helper()
		u, err := svc.BeginUpload(ctx, id, "o")
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		if err := u.Add(p, strings.NewReader(content)); err != nil {
			t.Fatal(err)
		}
		if _, err := u.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	types := func(evs []service.WatchEvent, name string) string {
		var out []string
		for _, e := range evs {
			if strings.Contains(e.Name, ".codecage-upload-") {
				t.Fatalf("the temporary name was reported: %+v", e)
			}
			if e.Name == name {
				out = append(out, e.Type)
			}
		}
		return strings.Join(out, ",")
	}
	marks := 0
	settle := func(name string, n int) string {
		t.Helper()
		var seen []service.WatchEvent
		deadline := time.Now().Add(10 * time.Second)
		for len(strings.Split(types(seen, name), ",")) < n || types(seen, name) == "" {
			if time.Now().After(deadline) {
				break
			}
			evs, _ := w.Take()
			seen = append(seen, evs...)
			time.Sleep(20 * time.Millisecond)
		}
		// Nothing more comes for name: the watch reports in order, and
		// a file uploaded after it has been reported.
		marks++
		mark := fmt.Sprintf("mark-%d.txt", marks)
		upload(mark, "m")
		for deadline := time.Now().Add(10 * time.Second); !slices.ContainsFunc(seen, func(e service.WatchEvent) bool { return e.Name == mark }); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no event for %s within 10 s", mark)
			}
			evs, _ := w.Take()
			seen = append(seen, evs...)
		}
		return types(seen, name)
	}
	// The directory first: one made after the watch began is scanned when
	// the watch follows it, and what the scan finds is a create.
	upload("d/seed.txt", "x")
	settle("d/seed.txt", 1)
	upload("d/f.txt", "hello")
	if got := settle("d/f.txt", 3); got != "create,chmod,write" {
		t.Fatalf("a new file: %s", got)
	}
	upload("d/f.txt", "again")
	if got := settle("d/f.txt", 3); got != "write,chmod,write" {
		t.Fatalf("a file replaced: %s", got)
	}
	upload("empty.txt", "")
	if got := settle("empty.txt", 2); got != "create,chmod" {
		t.Fatalf("an empty file: %s", got)
	}
}

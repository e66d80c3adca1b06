package service_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/service"
)

// plantTrees fills a session's workspace: the code makes wide/ with n
// empty files and deep/a/a/... 2,000 levels deep as the issue did; the
// host (root, not slowed by Landlock, which makes each mkdir of the code
// cost its depth) then takes the chain as deep as the workspace's inodes
// allow, less 64 left for the file API. It returns the depth.
func plantTrees(t *testing.T, svc *service.Service, id, ws string, wide int) int {
	t.Helper()
	code := `import os
os.mkdir('wide')
for i in range(` + strconv.Itoa(wide) + `):
    open('wide/%d' % i, 'w').close()
os.mkdir('deep'); os.chdir('deep')
for i in range(2000):
    os.mkdir('a'); os.chdir('a')
print('planted')`
	res, err := svc.Execute(context.Background(), service.Request{SessionID: id, Code: code, Timeout: 120 * time.Second})
	if err != nil || !res.Success || res.Stdout != "planted\n" {
		t.Fatalf("planting: %v %+v", err, res)
	}
	for i := range 64 {
		if err := os.Mkdir(filepath.Join(ws, "spare"+strconv.Itoa(i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fd, err := unix.Open(filepath.Join(ws, "deep"), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	depth := 0
	for {
		next, err := unix.Openat(fd, "a", unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		if err == unix.ENOENT {
			if err = unix.Mkdirat(fd, "a", 0o755); err == unix.ENOSPC {
				break
			}
			if err == nil {
				next, err = unix.Openat(fd, "a", unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
			}
		}
		if err != nil {
			t.Fatalf("deepening at %d: %v", depth, err)
		}
		unix.Close(fd)
		fd, depth = next, depth+1
	}
	unix.Close(fd)
	for i := range 64 {
		if err := os.Remove(filepath.Join(ws, "spare"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(ws, &st); err != nil {
		t.Fatal(err)
	}
	if st.Ffree > 100 {
		t.Fatalf("%d inodes of %d still free: the planted tree is not there", st.Ffree, st.Files)
	}
	return depth
}

// hostRead reads ws/rel from the host, however long rel is (a thousand
// components at a time, each batch from the last one's descriptor).
func hostRead(ws, rel string) ([]byte, error) {
	fd, err := unix.Open(ws, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	parts := strings.Split(rel, "/")
	for len(parts) > 1 {
		n := min(1000, len(parts)-1)
		next, err := unix.Openat(fd, strings.Join(parts[:n], "/"), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		unix.Close(fd)
		if err != nil {
			return nil, err
		}
		fd, parts = next, parts[n:]
	}
	defer unix.Close(fd)
	f, err := unix.Openat(fd, parts[0], unix.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	file := os.NewFile(uintptr(f), rel)
	defer file.Close()
	return io.ReadAll(file)
}

// within runs op and fails the test when it costs more than limit of this
// process's CPU (the file API runs here, on the host's side of the
// workspace): CPU, not wall time, so that a loaded machine does not fail
// it, while work that grows with the tree still does. The op gets its own
// deadline too, and a hang fails at 10 times limit of wall time.
func within(t *testing.T, name string, limit time.Duration, op func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*limit)
	defer cancel()
	done := make(chan error, 1)
	start, cpu0 := time.Now(), processCPU(t)
	go func() { done <- op(ctx) }()
	select {
	case err := <-done:
		d, cpu := time.Since(start), processCPU(t)-cpu0
		t.Logf("%s: %v (%v of CPU)", name, d, cpu)
		if cpu > limit {
			t.Errorf("%s took %v of CPU (limit %v)", name, cpu, limit)
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	case <-time.After(10 * limit):
		t.Fatalf("%s still running after %v", name, 10*limit)
	}
}

// processCPU is the CPU time this process used so far, every thread's.
func processCPU(t *testing.T) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The item 3: file operations cost what the path they name does,
// whatever the code planted; a listing is bounded and says so; a removal
// stops when its request is canceled.
func TestFileOpsCostFollowThePathNotTheTree(t *testing.T) {
	state := t.TempDir()
	svc := sessionService(t, func(c *config.Config) { c.StateDir = state })
	id := newSession(t, svc, "", "filesystem")
	ws := filepath.Join(state, "sessions", id)
	if os.Geteuid() != 0 {
		t.Fatal("this test plants as many inodes as the workspace tmpfs allows: it needs root")
	}
	const wide = service.MaxListedFiles + 2000
	depth := plantTrees(t, svc, id, ws, wide)
	t.Logf("planted %d files side by side and a tree %d deep", wide, depth)
	if depth < 40000 {
		t.Fatalf("the deep tree is only %d levels", depth)
	}
	// As deep as a path the API takes (4096 bytes) can name.
	deep := "deep/" + strings.Repeat("a/", 2040)
	const limit = 2 * time.Second

	within(t, "write at the top", limit, func(ctx context.Context) error {
		_, err := svc.WriteFile(ctx, id, "", "top.txt", []byte("1"))
		return err
	})
	within(t, "write deep", limit, func(ctx context.Context) error {
		_, err := svc.WriteFile(ctx, id, "", deep+"f", []byte("1"))
		return err
	})
	within(t, "read deep", limit, func(ctx context.Context) error {
		b, err := svc.ReadFile(ctx, id, "", deep+"f")
		if err == nil && string(b) != "1" {
			err = errors.New("read " + string(b))
		}
		return err
	})
	within(t, "stat deep", limit, func(ctx context.Context) error {
		_, err := svc.StatFile(ctx, id, "", deep+"f")
		return err
	})
	within(t, "mkdir deep", limit, func(ctx context.Context) error {
		_, err := svc.MakeDir(ctx, id, "", deep+"m/n")
		return err
	})
	within(t, "move deep", limit, func(ctx context.Context) error {
		_, err := svc.MoveFile(ctx, id, "", deep+"f", deep+"m/n/g")
		return err
	})
	if b, err := hostRead(ws, deep+"m/n/g"); err != nil || string(b) != "1" {
		t.Fatalf("the moved file, from the host: %q %v", b, err)
	}
	within(t, "list all", limit, func(ctx context.Context) error {
		l, err := svc.ListFiles(ctx, id, "", "")
		if err == nil && (!l.Truncated || len(l.Files) > service.MaxListedFiles || len(l.Files) == 0) {
			t.Errorf("listing the workspace: %d entries, truncated %v", len(l.Files), l.Truncated)
		}
		return err
	})
	within(t, "list the deep tree", limit, func(ctx context.Context) error {
		l, err := svc.ListFiles(ctx, id, "", "deep")
		if err == nil && (!l.Truncated || len(l.Files) != service.MaxListDepth) {
			t.Errorf("listing deep: %d entries, truncated %v; want %d, truncated", len(l.Files), l.Truncated, service.MaxListDepth)
		}
		return err
	})
	within(t, "list the wide directory", limit, func(ctx context.Context) error {
		l, err := svc.ListDir(ctx, id, "", "wide", 1)
		if err == nil && (!l.Truncated || len(l.Files) != service.MaxListedFiles) {
			t.Errorf("listing wide: %d entries, truncated %v; want %d, truncated", len(l.Files), l.Truncated, service.MaxListedFiles)
		}
		return err
	})
	within(t, "list one level", limit, func(ctx context.Context) error {
		l, err := svc.ListDir(ctx, id, "", "deep", 1)
		if err == nil && (l.Truncated || len(l.Files) != 1 || l.Files[0].Path != "deep/a") {
			t.Errorf("listing deep at depth 1: %+v", l)
		}
		return err
	})
	if _, err := svc.ListDir(context.Background(), id, "", "deep", service.MaxListDepth+1); !errors.Is(err, service.ErrInvalidRequest) {
		t.Errorf("a depth over the cap: %v", err)
	}
	if _, err := svc.WriteFile(context.Background(), id, "", deep+strings.Repeat("b/", 100)+"f", nil); !errors.Is(err, service.ErrBadPath) {
		t.Errorf("a path over 4096 bytes: %v", err)
	}

	// A removal whose request ends stops, leaving part of the tree.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	start := time.Now()
	err := svc.DeleteFile(ctx, id, "", "deep")
	if d := time.Since(start); !errors.Is(err, context.Canceled) || d > time.Second {
		t.Fatalf("a canceled removal of the deep tree: %v after %v", err, d)
	}
	if _, err := os.Lstat(filepath.Join(ws, "deep")); err != nil {
		t.Fatalf("the canceled removal removed all of it: %v", err)
	}
	within(t, "remove the wide directory", limit, func(ctx context.Context) error { return svc.DeleteFile(ctx, id, "", "wide") })
	within(t, "remove the deep tree", 5*limit, func(ctx context.Context) error { return svc.DeleteFile(ctx, id, "", "deep") })
	// From the host: only what the test wrote at the top is left. (Inodes
	// are not the judge: gVisor's gofer may hold removed files open.)
	ents, err := os.ReadDir(ws)
	if err != nil || len(ents) != 1 || ents[0].Name() != "top.txt" {
		t.Fatalf("the workspace after the removals: %v %v", ents, err)
	}
}

package wsfs_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/codecage/codecage/internal/wsfs"
)

// layout makes ws/ (the workspace) beside outside/secret, with links out
// of the workspace planted as sandboxed code would.
func layout(t *testing.T) (ws, outside string, r *wsfs.Root) {
	t.Helper()
	base := t.TempDir()
	ws, outside = filepath.Join(base, "ws"), filepath.Join(base, "outside")
	for _, d := range []string{ws, outside, filepath.Join(ws, "d")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("host"), 0o644))
	must(t, os.WriteFile(filepath.Join(ws, "in.txt"), []byte("in"), 0o644))
	must(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(ws, "abs")))
	must(t, os.Symlink("../outside/secret", filepath.Join(ws, "rel")))
	must(t, os.Symlink("../../outside", filepath.Join(ws, "d", "up")))
	must(t, os.Symlink("/", filepath.Join(ws, "d", "root")))
	must(t, os.Symlink("in.txt", filepath.Join(ws, "ok")))
	must(t, os.Symlink("loop", filepath.Join(ws, "loop")))
	must(t, unix.Mkfifo(filepath.Join(ws, "fifo"), 0o644))
	r, err := wsfs.Open(ws)
	must(t, err)
	t.Cleanup(func() { r.Close() })
	return ws, outside, r
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestLinksOutOfTheWorkspaceAreRefused(t *testing.T) {
	ws, outside, r := layout(t)
	for _, p := range []string{"abs", "rel", "d/up/secret", "d/root/etc/passwd", "loop"} {
		if f, err := r.OpenFile(p, os.O_RDONLY, 0); err == nil {
			b, _ := io.ReadAll(f)
			f.Close()
			t.Errorf("read %s: %q", p, b)
		}
		if f, err := r.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644); err == nil {
			f.Close()
			t.Errorf("opened %s for writing", p)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "host" {
		t.Fatalf("the host file changed: %q", b)
	}
	// A link that stays inside is followed, as before.
	f, err := r.OpenFile("ok", os.O_RDONLY, 0)
	must(t, err)
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "in" {
		t.Fatalf("inside link: %q", b)
	}
	// Described, not followed.
	if e, err := r.Lstat("abs"); err != nil || e.Mode&fs.ModeSymlink == 0 || e.Target != filepath.Join(outside, "secret") {
		t.Fatalf("lstat abs: %+v %v", e, err)
	}
	if _, err := r.MkdirAll("d/up/made", 0o755, -1); err == nil {
		t.Error("mkdir through a link out succeeded")
	}
	if _, err := os.Lstat(filepath.Join(outside, "made")); err == nil {
		t.Fatal("a directory was made outside")
	}
	if err := r.Rename("d/up/secret", "stolen"); err == nil {
		t.Error("a rename through a link out succeeded")
	}
	if err := r.Rename("in.txt", "d/up/planted"); err == nil {
		t.Error("a rename to outside succeeded")
	}
	l, err := r.List(context.Background(), ".", wsfs.ListLimits{Depth: 10, Entries: 100, Bytes: 1 << 20})
	must(t, err)
	for _, e := range l.Entries {
		if strings.Contains(e.Path, "secret") || strings.Contains(e.Path, "passwd") || strings.HasPrefix(e.Path, "d/up/") {
			t.Errorf("the listing went through a link: %s", e.Path)
		}
	}
	if _, err := r.List(context.Background(), "d/up", wsfs.ListLimits{Depth: 1, Entries: 100, Bytes: 1 << 20}); err == nil {
		t.Error("listed a directory outside")
	}
	must(t, r.RemoveAll(context.Background(), "d"))
	if _, err := os.Lstat(filepath.Join(ws, "d")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("d is still there: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "host" {
		t.Fatalf("removing a directory with a link out touched the host: %q", b)
	}
	if err := r.RemoveAll(context.Background(), "."); err == nil {
		t.Fatal("removed the workspace itself")
	}
}

// Swapping a directory for a link out while the API walks it never takes
// the walk outside.
func TestSwapsUnderAWalkStayInside(t *testing.T) {
	ws, outside, r := layout(t)
	keep := filepath.Join(outside, "keep")
	must(t, os.WriteFile(keep, []byte("keep"), 0o644))
	// s swaps, atomically, between a directory and a link out (l).
	s, l := filepath.Join(ws, "s"), filepath.Join(ws, "l")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, p := range []string{s, l} {
				if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
					_ = os.WriteFile(filepath.Join(p, "f"), nil, 0o644)
				}
			}
			_, serr := os.Lstat(s)
			_, lerr := os.Lstat(l)
			switch {
			case serr != nil && lerr != nil:
				_ = os.Mkdir(s, 0o755)
				_ = os.Symlink(outside, l)
			case serr != nil:
				_ = os.Mkdir(s, 0o755)
			case lerr != nil:
				_ = os.Symlink(outside, l)
			}
			_ = unix.Renameat2(unix.AT_FDCWD, l, unix.AT_FDCWD, s, unix.RENAME_EXCHANGE)
		}
	}()
	ctx := context.Background()
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		_ = r.RemoveAll(ctx, "s")
		_, _ = r.List(ctx, ".", wsfs.ListLimits{Depth: 5, Entries: 100, Bytes: 1 << 20})
		if f, err := r.OpenFile("s/planted", os.O_WRONLY|os.O_CREATE, 0o644); err == nil {
			f.Close()
		}
		_, _ = r.MkdirAll("s/dir", 0o755, -1)
	}
	close(stop)
	<-done
	ents, err := os.ReadDir(outside)
	must(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "keep secret" {
		t.Fatalf("outside now holds %v", names)
	}
}

func TestListIsBoundedAndOrdered(t *testing.T) {
	ws := t.TempDir()
	for _, p := range []string{"b/x/y/z", "a", "c"} {
		must(t, os.MkdirAll(filepath.Join(ws, p), 0o755))
	}
	must(t, os.WriteFile(filepath.Join(ws, "b/x/f"), []byte("12345"), 0o600))
	r, err := wsfs.Open(ws)
	must(t, err)
	defer r.Close()
	list := func(rel string, lim wsfs.ListLimits) (string, bool) {
		t.Helper()
		l, err := r.List(context.Background(), rel, lim)
		must(t, err)
		var paths []string
		for _, e := range l.Entries {
			paths = append(paths, e.Path)
		}
		return strings.Join(paths, " "), l.Truncated
	}
	all := wsfs.ListLimits{Depth: 10, Entries: 100, Bytes: 1 << 20}
	if got, tr := list(".", all); got != "a b b/x b/x/f b/x/y b/x/y/z c" || tr {
		t.Fatalf("all: %q %v", got, tr)
	}
	if got, tr := list("b", wsfs.ListLimits{Depth: 1, Entries: 100, Bytes: 1 << 20}); got != "b/x" || tr {
		t.Fatalf("depth 1 (asked): %q %v", got, tr)
	}
	if got, tr := list(".", wsfs.ListLimits{Depth: 2, MarkDeeper: true, Entries: 100, Bytes: 1 << 20}); got != "a b b/x c" || !tr {
		t.Fatalf("depth 2 as a cap: %q %v", got, tr)
	}
	if got, tr := list(".", wsfs.ListLimits{Depth: 4, MarkDeeper: true, Entries: 100, Bytes: 1 << 20}); got != "a b b/x b/x/f b/x/y b/x/y/z c" || tr {
		t.Fatalf("a cap nothing reaches: %q %v", got, tr)
	}
	if got, tr := list(".", wsfs.ListLimits{Depth: 10, Entries: 3, Bytes: 1 << 20}); got != "a b b/x" || !tr {
		t.Fatalf("3 entries: %q %v", got, tr)
	}
	if got, tr := list(".", wsfs.ListLimits{Depth: 10, Entries: 100, Bytes: 4}); got != "a b" || !tr {
		t.Fatalf("4 bytes: %q %v", got, tr)
	}
	l, err := r.List(context.Background(), "b/x", all)
	must(t, err)
	if e := l.Entries[0]; e.Path != "b/x/f" || e.Size != 5 || e.Mode != 0o600 {
		t.Fatalf("entry %+v", e)
	}
	if _, err := r.List(context.Background(), "b/x/f", all); !errors.Is(err, wsfs.ErrNotDir) {
		t.Fatalf("listing a file: %v", err)
	}
}

// countdown is a context that ends after n checks: a walk that checks it
// in its loops stops there, deterministically.
type countdown struct {
	context.Context
	n atomic.Int64
}

func (c *countdown) Err() error {
	if c.n.Add(-1) < 0 {
		return context.Canceled
	}
	return nil
}

// deepChain makes dir/a/a/... depth levels deep through descriptors.
func deepChain(t testing.TB, dir string, depth int) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	must2(t, err)
	for range depth {
		must2(t, unix.Mkdirat(fd, "a", 0o755))
		next, err := unix.Openat(fd, "a", unix.O_PATH|unix.O_DIRECTORY, 0)
		must2(t, err)
		unix.Close(fd)
		fd = next
	}
	unix.Close(fd)
}

func must2(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// scratch is a tmpfs of its own when we may mount one (a workspace is, as
// root); ext4 removes directories a hundred times slower.
func scratch(t *testing.T) string {
	dir := t.TempDir()
	if unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64m,nr_inodes=65536") == nil {
		t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	}
	return dir
}

func TestRemoveAllDeepWideAndCanceled(t *testing.T) {
	ws := scratch(t)
	must(t, os.Mkdir(filepath.Join(ws, "t"), 0o755))
	deepChain(t, filepath.Join(ws, "t"), 20000)
	for i := range 3000 {
		must(t, os.WriteFile(filepath.Join(ws, "t", "f"+strconv.Itoa(i)), nil, 0o644))
	}
	r, err := wsfs.Open(ws)
	must(t, err)
	defer r.Close()
	ctx := &countdown{Context: context.Background()}
	ctx.n.Store(500)
	if err := r.RemoveAll(ctx, "t"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a canceled removal: %v", err)
	}
	if ctx.n.Load() < -5 {
		t.Fatalf("the removal went on %d checks after its context ended", -ctx.n.Load())
	}
	if _, err := os.Lstat(filepath.Join(ws, "t")); err != nil {
		t.Fatalf("the canceled removal removed it all: %v", err)
	}
	lctx := &countdown{Context: context.Background()}
	lctx.n.Store(100)
	if _, err := r.List(lctx, "t", wsfs.ListLimits{Depth: 64, Entries: 10000, Bytes: 1 << 20}); !errors.Is(err, context.Canceled) {
		t.Fatalf("a canceled listing: %v", err)
	}
	start := time.Now()
	must(t, r.RemoveAll(context.Background(), "t"))
	t.Logf("removed the rest in %v", time.Since(start))
	if ents, _ := os.ReadDir(ws); len(ents) != 0 {
		t.Fatalf("left: %v", ents)
	}
}

func TestMkdirAllMakesWhatIsMissing(t *testing.T) {
	ws := t.TempDir()
	r, err := wsfs.Open(ws)
	must(t, err)
	defer r.Close()
	for _, tc := range []struct {
		rel     string
		created bool
	}{
		{"a", true}, {"a", false}, {"a/b/c", true}, {"a/b/c/d/e/f/g/h/i/j/k/l", true}, {"a/b", false}, {"x/" + strings.Repeat("y/", 20) + "z", true},
	} {
		created, err := r.MkdirAll(tc.rel, 0o755, os.Getuid())
		if err != nil || created != tc.created {
			t.Fatalf("MkdirAll(%s) = %v, %v; want %v", tc.rel, created, err, tc.created)
		}
		if fi, err := os.Stat(filepath.Join(ws, tc.rel)); err != nil || !fi.IsDir() {
			t.Fatalf("%s: %v", tc.rel, err)
		}
	}
	must(t, os.WriteFile(filepath.Join(ws, "file"), nil, 0o644))
	if _, err := r.MkdirAll("file/sub", 0o755, -1); err == nil {
		t.Fatal("made a directory under a file")
	}
}

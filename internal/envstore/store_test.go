package envstore_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/envstore"
)

// fillRoot writes a small tree; identical calls give identical content.
func fillRoot(t testing.TB, dir string) {
	writeFile(t, filepath.Join(dir, "usr/bin/python3"), "#!python\n", 0o755)
	writeFile(t, filepath.Join(dir, "usr/lib/x.py"), "x = 1\n", 0o664)
	if err := os.Symlink("usr/bin", filepath.Join(dir, "bin")); err != nil {
		t.Fatal(err)
	}
}

func TestContentAddressedAndGC(t *testing.T) {
	s := openStore(t)
	var envs []envstore.Env
	for i, name := range []string{"one", "two"} {
		st := stage(t, s)
		fillRoot(t, st.Root())
		// Times and owners differ between the builds; content does not.
		os.Chtimes(filepath.Join(st.Root(), "usr/lib/x.py"), time.Unix(int64(i*1000), 0), time.Unix(int64(i*1000), 0))
		os.Lchown(filepath.Join(st.Root(), "usr/lib/x.py"), 1000+i, 1000+i)
		writeFile(t, filepath.Join(st.Layer(), "pkg/__init__.py"), "", 0o644)
		e, err := s.Commit(st, envstore.Env{Name: name, Python: "/usr/bin/python3"})
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, e)
	}
	if envs[0].RootDir != envs[1].RootDir || envs[0].LayerDir != envs[1].LayerDir || envs[0].ID != envs[1].ID {
		t.Fatalf("identical content stored twice: %+v vs %+v", envs[0], envs[1])
	}
	if got := entries(t, s, "roots"); len(got) != 1 {
		t.Fatalf("roots/ = %v, want one", got)
	}
	if got, err := s.Get("one"); err != nil || got.RootDir != envs[0].RootDir || got.Python != "/usr/bin/python3" {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if l, err := s.List(); err != nil || len(l) != 2 || l[0].Name != "one" || l[1].Name != "two" {
		t.Fatalf("List = %+v, %v", l, err)
	}
	fi, err := os.Stat(filepath.Join(envs[0].RootDir, "usr/lib/x.py"))
	if err != nil || fi.Mode().Perm() != 0o644 || fi.Sys().(*syscall.Stat_t).Uid != uint32(os.Getuid()) {
		t.Fatalf("committed file: %v %v, want 0644 owned by the operator", fi, err)
	}

	if err := s.Remove("one"); err != nil {
		t.Fatal(err)
	}
	if rep, err := s.GC(); err != nil || rep.Roots != 0 || rep.Layers != 0 {
		t.Fatalf("GC with the root still used = %+v, %v", rep, err)
	}
	if err := s.Remove("two"); err != nil {
		t.Fatal(err)
	}
	rep, err := s.GC()
	if err != nil || rep.Roots != 1 || rep.Layers != 1 || rep.Bytes == 0 {
		t.Fatalf("GC = %+v, %v; want one root, one layer, some bytes", rep, err)
	}
	assertEmptyStore(t, s)
	if err := s.Remove("two"); !errors.Is(err, envstore.ErrNotFound) {
		t.Fatalf("Remove of a missing name = %v", err)
	}
	if _, err := s.Get("two"); !errors.Is(err, envstore.ErrNotFound) {
		t.Fatalf("Get of a missing name = %v", err)
	}
}

func TestNamesAndEmptyDirs(t *testing.T) {
	s := openStore(t)
	for _, bad := range []string{"", "../x", "A", "a/b", ".hidden", strings.Repeat("a", 65)} {
		st := stage(t, s)
		if _, err := s.Commit(st, envstore.Env{Name: bad}); !errors.Is(err, envstore.ErrBadName) {
			t.Errorf("Commit(%q) = %v, want ErrBadName", bad, err)
		}
		if _, err := s.Get(bad); !errors.Is(err, envstore.ErrBadName) {
			t.Errorf("Get(%q) = %v, want ErrBadName", bad, err)
		}
	}
	// Nothing staged: the record keeps the caller's dirs (the host root here).
	st := stage(t, s)
	e, err := s.Commit(st, envstore.Env{Name: "host-only"})
	if err != nil || e.RootDir != "" || e.LayerDir != "" || e.Size != 0 {
		t.Fatalf("empty commit = %+v, %v", e, err)
	}
	if got := entries(t, s, "staging"); len(got) != 0 {
		t.Fatalf("staging = %v", got)
	}
}

func TestConcurrentBuildsOfOneName(t *testing.T) {
	s := openStore(t)
	const n = 4
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		st := stage(t, s)
		writeFile(t, filepath.Join(st.Root(), "which"), fmt.Sprint(i), 0o644)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.Commit(st, envstore.Env{Name: "same"})
		}()
	}
	wg.Wait()
	ok, exists := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, envstore.ErrExists):
			exists++
		default:
			t.Errorf("commit: %v", err)
		}
	}
	if ok != 1 || exists != n-1 {
		t.Fatalf("%d commits landed, %d got ErrExists; want 1 and %d", ok, exists, n-1)
	}
	if got := entries(t, s, "staging"); len(got) != 0 {
		t.Fatalf("staging = %v after the builds", got)
	}
	s.GC()
	if got := entries(t, s, "roots"); len(got) != 1 {
		t.Fatalf("roots = %v after GC, want the winner's only", got)
	}
}

func TestOpenSweepsStaging(t *testing.T) {
	s := openStore(t)
	live := stage(t, s)
	writeFile(t, filepath.Join(live.Root(), "keep"), "live build", 0o644)
	// A build whose process died: its directory is there, unlocked.
	crashed := filepath.Join(s.Dir(), "staging", "b-crashed")
	writeFile(t, filepath.Join(crashed, "root/usr/x"), "half", 0o644)
	os.Chmod(filepath.Join(crashed, "root/usr"), 0o555)

	if _, err := envstore.Open(s.Dir()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(crashed); !os.IsNotExist(err) {
		t.Fatalf("the crashed build's staging survived Open: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(live.Root(), "keep")); err != nil {
		t.Fatalf("Open swept a live build's staging: %v", err)
	}
}

func TestCommitRefusesDeviceNodes(t *testing.T) {
	s := openStore(t)
	st := stage(t, s)
	writeFile(t, filepath.Join(st.Root(), "usr/bin/python3"), "x", 0o755)
	if err := syscall.Mknod(filepath.Join(st.Root(), "null"), syscall.S_IFCHR|0o666, int(1<<8|3)); err != nil {
		t.Skipf("mknod: %v (needs root)", err)
	}
	_, err := s.Commit(st, envstore.Env{Name: "dev"})
	if !errors.Is(err, envstore.ErrBadImage) || !strings.Contains(err.Error(), "device node at null") {
		t.Fatalf("Commit = %v, want ErrBadImage naming the device", err)
	}
	assertEmptyStore(t, s)
}

func TestCheckRoot(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "usr/bin/python3.11"), "x", 0o755)
	os.Symlink("python3.11", filepath.Join(root, "usr/bin/python3"))
	os.Symlink("usr/bin", filepath.Join(root, "bin"))
	os.Symlink("/usr/lib", filepath.Join(root, "lib")) // absolute: inside the root
	if err := envstore.CheckRoot(root); err != nil {
		t.Fatalf("CheckRoot of a sound root: %v", err)
	}
	if py, err := envstore.FindPython(root); err != nil || py != "/usr/bin/python3" {
		t.Fatalf("FindPython = %q, %v", py, err)
	}

	loop := t.TempDir()
	os.MkdirAll(filepath.Join(loop, "usr/local/bin"), 0o755)
	os.Symlink("b", filepath.Join(loop, "usr/local/bin/a"))
	os.Symlink("a", filepath.Join(loop, "usr/local/bin/b"))
	os.Symlink("a", filepath.Join(loop, "usr/local/bin/python3"))
	err := envstore.CheckRoot(loop)
	if !errors.Is(err, envstore.ErrBadImage) || !strings.Contains(err.Error(), "symlink loop at /usr/local/bin/") {
		t.Fatalf("CheckRoot of a loop = %v", err)
	}
	if _, err := envstore.FindPython(loop); !errors.Is(err, envstore.ErrBadImage) {
		t.Fatalf("FindPython through a loop = %v", err)
	}

	escape := t.TempDir()
	os.Symlink("../../../../../usr", filepath.Join(escape, "usr"))
	if err := envstore.CheckRoot(escape); !errors.Is(err, envstore.ErrBadImage) || !strings.Contains(err.Error(), "climbs out") {
		t.Fatalf("CheckRoot of an escaping link = %v", err)
	}

	none := t.TempDir()
	if _, err := envstore.FindPython(none); !errors.Is(err, envstore.ErrBadImage) || !strings.Contains(err.Error(), "no python3") {
		t.Fatalf("FindPython of an empty root = %v", err)
	}
}

// A deep chain of directories costs a link check per path, not per level squared.
func TestCheckRootDeepChain(t *testing.T) {
	root := t.TempDir()
	// usr -> d0/d1/.../d199 (a real deep tree), bin -> usr/bin.
	deep := filepath.Join(root, filepath.Join(strings.Split(strings.Repeat("d/", 200), "/")...))
	os.MkdirAll(filepath.Join(deep, "bin"), 0o755)
	rel, _ := filepath.Rel(root, deep)
	os.Symlink(rel, filepath.Join(root, "usr"))
	os.Symlink("usr/bin", filepath.Join(root, "bin"))
	start := time.Now()
	if err := envstore.CheckRoot(root); err != nil {
		t.Fatal(err)
	}
	t.Logf("CheckRoot of a 200-deep tree: %v", time.Since(start))
}

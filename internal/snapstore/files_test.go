package snapstore

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// File sets (a memory image's directory) on every backend: written in
// place, sealed per file at Commit, verified by Get, read as a directory.

// The files cross the chunked MAC's 16 MiB chunks unevenly.
const (
	setBig   = 2*fileChunk + 4321
	setSmall = 777
)

func init() {
	storeCases = append(storeCases,
		storeCase{"FileSetRoundTrip", testFileSetRoundTrip},
		storeCase{"FileSetFlippedByteRefused", testFileSetFlipped},
		storeCase{"FileSetOverTheLimitLeavesNothing", testFileSetLimit},
		storeCase{"FileSetNotRegularRefused", testFileSetNotRegular})
}

func writeFile(t *testing.T, path string, seed byte, n int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, gen(seed, n)); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func fileSum(t *testing.T, path string) ([32]byte, int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	n, _ := io.Copy(h, f)
	return [32]byte(h.Sum(nil)), n
}

// putSet stores a snapshot with a workspace blob and a file set "memory"
// of two files, written into the directory Files gave.
func putSet(t *testing.T, s *Store, kind Kind, owner, id string) (Manifest, error) {
	t.Helper()
	m := manifest(owner, id)
	m.Kind = kind
	w, err := s.Create(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	dir, err := w.Files("memory")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "pages.img"), 3, setBig)
	writeFile(t, filepath.Join(dir, "checkpoint.img"), 4, setSmall)
	bw, err := w.Blob("workspace")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(bw, gen(5, 1000))
	return w.Commit()
}

func testFileSetRoundTrip(t *testing.T, e backendEnv) {
	s := e.open(t, Options{TempDir: t.TempDir()})
	for _, kind := range []Kind{KindSnapshot, KindPaused} {
		id := "set-" + string(kind)
		put, err := putSet(t, s, kind, "alice", id)
		if err != nil {
			t.Fatal(err)
		}
		if put.Version != fileSetVersion || put.Size != setBig+setSmall+1000 || len(put.Blobs) != 3 {
			t.Fatalf("stored manifest: %+v", put)
		}
		sn, err := s.Get(context.Background(), "alice", id)
		if err != nil {
			t.Fatal(err)
		}
		fs, err := sn.Files("memory", t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		entries, _ := os.ReadDir(fs.Dir)
		if len(entries) != 2 {
			t.Fatalf("the set's directory holds %d entries, want 2", len(entries))
		}
		for _, f := range []struct {
			name string
			seed byte
			size int64
		}{{"pages.img", 3, setBig}, {"checkpoint.img", 4, setSmall}} {
			if sum, n := fileSum(t, filepath.Join(fs.Dir, f.name)); n != f.size || sum != genSum(f.seed, f.size) {
				t.Fatalf("%s: %d bytes, differs", f.name, n)
			}
			// The same bytes as a stream.
			if sum, n := readBlobSum(t, sn, "memory/"+f.name); n != f.size || sum != genSum(f.seed, f.size) {
				t.Fatalf("memory/%s as a stream: %d bytes, differs", f.name, n)
			}
		}
		if err := fs.Check(); err != nil {
			t.Fatalf("check of untouched files: %v", err)
		}
		fs.Close()
		sn.Close()
		if err := s.Delete(context.Background(), "alice", id); err != nil {
			t.Fatal(err)
		}
	}
	if snaps, left := e.stored(t); snaps != 0 || left != 0 {
		t.Fatalf("after deletes: %d snapshots, %d leftovers", snaps, left)
	}
}

// A byte changed in the big file's last chunk is refused by Get.
func testFileSetFlipped(t *testing.T, e backendEnv) {
	s := e.open(t, Options{TempDir: t.TempDir()})
	if _, err := putSet(t, s, KindSnapshot, "alice", "s1"); err != nil {
		t.Fatal(err)
	}
	e.flipBlob(t, "alice", "s1", "memory/pages.img", setBig-10)
	mustRefuse(t, s, "alice", "s1", ErrTampered)
}

func testFileSetLimit(t *testing.T, e backendEnv) {
	s := e.open(t, Options{TempDir: t.TempDir(), MaxBytes: setBig})
	if _, err := putSet(t, s, KindSnapshot, "alice", "s1"); !errors.Is(err, ErrLimit) {
		t.Fatalf("a file set over the limit: %v, want ErrLimit", err)
	}
	if snaps, left := e.stored(t); snaps != 0 || left != 0 {
		t.Fatalf("after a refused file set: %d snapshots, %d leftovers", snaps, left)
	}
}

func testFileSetNotRegular(t *testing.T, e backendEnv) {
	s := e.open(t, Options{TempDir: t.TempDir()})
	w, err := s.Create(context.Background(), manifest("alice", "s1"))
	if err != nil {
		t.Fatal(err)
	}
	dir, err := w.Files("memory")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "pages.img"), 3, 10)
	if err := os.Symlink("/etc/shadow", filepath.Join(dir, "checkpoint.img")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a symbolic link in a file set: %v, want ErrInvalid", err)
	}
	if snaps, left := e.stored(t); snaps != 0 || left != 0 {
		t.Fatalf("after a refused file set: %d snapshots, %d leftovers", snaps, left)
	}
}

// In the directory store the set is read in place: a file written or
// replaced after Get verified it, or a file added, fails Check (the
// loader's state is discarded then).
func TestDirFileSetChangedAfterVerification(t *testing.T) {
	e := dirEnv(t)
	s := e.open(t, Options{})
	if _, err := putSet(t, s, KindSnapshot, "alice", "s1"); err != nil {
		t.Fatal(err)
	}
	open := func() (*Snapshot, *FileSet) {
		sn, err := s.Get(context.Background(), "alice", "s1")
		if err != nil {
			t.Fatal(err)
		}
		fs, err := sn.Files("memory", "")
		if err != nil {
			t.Fatal(err)
		}
		return sn, fs
	}
	sn, fs := open()
	e.flipBlob(t, "alice", "s1", "memory/pages.img", 5)
	if err := fs.Check(); !errors.Is(err, ErrTampered) {
		t.Fatalf("a file written after its verification: %v, want ErrTampered", err)
	}
	sn.Close()
	e.flipBlob(t, "alice", "s1", "memory/pages.img", 5) // back as sealed
	sn, fs = open()
	p := filepath.Join(fs.Dir, "checkpoint.img")
	b, _ := os.ReadFile(p)
	os.Remove(p)
	os.WriteFile(p, b, 0o600) // the same bytes in another file
	if err := fs.Check(); !errors.Is(err, ErrTampered) {
		t.Fatalf("a file replaced after its verification: %v, want ErrTampered", err)
	}
	sn.Close()
	sn, fs = open()
	os.WriteFile(filepath.Join(fs.Dir, "pages_meta.img"), []byte("x"), 0o600)
	if err := fs.Check(); !errors.Is(err, ErrTampered) {
		t.Fatalf("a file added after the verification: %v, want ErrTampered", err)
	}
	sn.Close()
	if sn, err := s.Get(context.Background(), "alice", "s1"); err == nil {
		if _, err := sn.Files("memory", ""); !errors.Is(err, ErrTampered) {
			t.Fatalf("a set holding an unsealed file: %v, want ErrTampered", err)
		}
		sn.Close()
	}
}

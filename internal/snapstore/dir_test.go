package snapstore

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func dirEnv(t *testing.T) backendEnv {
	root := t.TempDir()
	dir := filepath.Join(root, "snapshots")
	snapPath := func(owner, id string) string { return filepath.Join(dir, filepath.FromSlash(snapDir(owner, id))) }
	return backendEnv{
		open: func(t *testing.T, o Options) *Store {
			o.Dir = dir
			o.SecretFile = filepath.Join(root, "snapshot-secret") // used when o.Secret is empty
			s, err := Open(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		flipBlob: func(t *testing.T, owner, id, blob string, off int64) {
			flipByte(t, filepath.Join(snapPath(owner, id), "blobs", blob), off)
		},
		flipManifest: func(t *testing.T, owner, id string) {
			p := filepath.Join(snapPath(owner, id), manifestFile)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			i := strings.Index(string(b), `"uid":`) + len(`"uid":`) // 1500000123 -> 1500000122: root in another uid
			flipByte(t, p, int64(i+9))
		},
		copyToOwner: func(t *testing.T, from, to, id string) {
			dst := snapPath(to, id)
			if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
				t.Fatal(err)
			}
			if out, err := runCmd("cp", "-a", snapPath(from, id), dst); err != nil {
				t.Fatalf("cp: %v %s", err, out)
			}
		},
		stored: func(t *testing.T) (int, int) {
			snaps, _ := filepath.Glob(filepath.Join(dir, "owners", "*", "*"))
			tmp, _ := filepath.Glob(filepath.Join(dir, "tmp", "*"))
			trash, _ := filepath.Glob(filepath.Join(dir, "trash", "*"))
			return len(snaps), len(tmp) + len(trash)
		},
	}
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 1
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestDirStore(t *testing.T) {
	for _, c := range storeCases {
		t.Run(c.name, func(t *testing.T) { c.test(t, dirEnv(t)) })
	}
}

// Without SANDBOX_SNAPSHOT_SECRET the directory store generates one, once,
// readable by the server alone, and refuses one that others can read.
func TestDirGeneratedSecret(t *testing.T) {
	root := t.TempDir()
	o := Options{Dir: filepath.Join(root, "snapshots"), SecretFile: filepath.Join(root, "state", "snapshot-secret")}
	s, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	st, err := os.Stat(o.SecretFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("secret file: %v %v", st, err)
	}
	first, _ := os.ReadFile(o.SecretFile)
	s, err = Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if again, _ := os.ReadFile(o.SecretFile); string(again) != string(first) || len(strings.TrimSpace(string(first))) != 64 {
		t.Fatalf("secret regenerated or short: %q then %q", first, again)
	}
	os.Chmod(o.SecretFile, 0o640)
	if _, err := Open(context.Background(), o); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("group-readable secret: %v", err)
	}
	if _, err := Open(context.Background(), Options{Dir: o.Dir, Secret: "short"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("short secret: %v", err)
	}
}

// A writer that dies before committing leaves a tmp/ entry, never a
// snapshot: a new store does not see it, and GC removes it once it is old.
func TestDirCrashLeavesNoSnapshot(t *testing.T) {
	e := dirEnv(t)
	now := time.Now()
	s := e.open(t, Options{Now: func() time.Time { return now }})
	w, err := s.Create(context.Background(), manifest("alice", "half"))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := w.Blob("a")
	io.Copy(out, gen(1, 2<<20)) // and the process "dies": no Commit, no Abort
	later := now.Add(2 * orphanGrace)
	s2 := e.open(t, Options{Now: func() time.Time { return later }})
	mustRefuse(t, s2, "alice", "half", ErrNotFound)
	if ms, _ := s2.List(context.Background(), "alice"); len(ms) != 0 {
		t.Fatal("a half snapshot is listed")
	}
	// The file times are real: age the leftover as a crash long ago would.
	_, left := e.stored(t)
	if left != 1 {
		t.Fatalf("%d leftovers, want the one tmp entry", left)
	}
	st, err := s2.GC(context.Background())
	if err != nil || st.Orphans != 1 {
		t.Fatalf("gc: %+v %v", st, err)
	}
	if snaps, left := e.stored(t); snaps != 0 || left != 0 {
		t.Fatalf("after GC: %d snapshots, %d leftovers", snaps, left)
	}
}

// A blob changed in place after Get verified it ends its stream in
// ErrTampered, not io.EOF, and its last bytes are withheld.
func TestDirChangedAfterVerification(t *testing.T) {
	e := dirEnv(t)
	s := e.open(t, Options{})
	putTwo(t, s, "alice", "s1")
	sn, err := s.Get(context.Background(), "alice", "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Close()
	e.flipBlob(t, "alice", "s1", "pages.img", 100)
	r, _ := sn.Blob("pages.img")
	n, err := io.Copy(io.Discard, r)
	if !errors.Is(err, ErrTampered) || n >= sizeB {
		t.Fatalf("read %d bytes, err %v; want ErrTampered before the end", n, err)
	}
}

// Ids are file names: no traversal out of the directory, even where the
// checks would be bypassed (a symlink planted inside is not followed out).
func TestDirNoEscape(t *testing.T) {
	e := dirEnv(t)
	s := e.open(t, Options{})
	outside := t.TempDir()
	od := filepath.Join(s.o.Dir, filepath.FromSlash(ownerDir("alice")))
	os.MkdirAll(filepath.Dir(od), 0o700)
	if err := os.Symlink(outside, od); err != nil {
		t.Fatal(err)
	}
	_, err := s.Put(context.Background(), manifest("alice", "x"), BlobSource{"a", gen(1, 10)})
	if err == nil {
		t.Fatal("a snapshot was committed through a symlink out of the store")
	}
	if left, _ := os.ReadDir(outside); len(left) != 0 {
		t.Fatalf("wrote outside the store: %v", left)
	}
}

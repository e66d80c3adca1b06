package snapstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

const testSecret = "0123456789abcdef0123456789abcdef-test"

// backendEnv is one backend under test: how to open a store on the same
// place again, and how to change its bytes behind the store's back.
type backendEnv struct {
	// open opens a store on this env's directory or database; o's Dir,
	// DSN and Secret are filled in.
	open func(t *testing.T, o Options) *Store
	// flipBlob flips one byte at offset off of a stored blob.
	flipBlob func(t *testing.T, owner, id, blob string, off int64)
	// flipManifest flips one byte of a stored manifest.
	flipManifest func(t *testing.T, owner, id string)
	// copyToOwner stores a copy of owner from's snapshot under owner to.
	copyToOwner func(t *testing.T, from, to, id string)
	// stored counts what is physically kept: snapshot entries, and data
	// that is no committed snapshot's (leftovers of writes and deletes).
	stored func(t *testing.T) (snapshots, leftovers int)
}

type storeCase struct {
	name string
	test func(t *testing.T, e backendEnv)
}

var storeCases = []storeCase{
	{"RoundTrip", testRoundTrip},
	{"ListAndDeleteByOwner", testListDelete},
	{"AnotherOwnerRefused", testAnotherOwner},
	{"FlippedBlobByteRefused", testFlippedBlob},
	{"FlippedManifestByteRefused", testFlippedManifest},
	{"LimitMidStreamLeavesNothing", testLimitMidStream},
	{"CountLimitBeforeWriting", testCountLimit},
	{"ConcurrentWritersShareTheLimit", testConcurrentLimit},
	{"TTLExpiryAndGC", testTTL},
	{"RestartSeesSnapshots", testRestart},
	{"HostileIDsAndNames", testHostile},
	{"ExistingIDRefused", testExists},
}

// genReader yields n pseudo-random bytes from seed, without holding them.
type genReader struct {
	r *rand.ChaCha8
	n int64
}

func gen(seed byte, n int64) *genReader {
	var s [32]byte
	s[0] = seed
	return &genReader{r: rand.NewChaCha8(s), n: n}
}

func (g *genReader) Read(p []byte) (int, error) {
	if g.n == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > g.n {
		p = p[:g.n]
	}
	n, _ := g.r.Read(p)
	g.n -= int64(n)
	return n, nil
}

func genSum(seed byte, n int64) [32]byte {
	h := sha256.New()
	io.Copy(h, gen(seed, n))
	return [32]byte(h.Sum(nil))
}

func manifest(owner, id string) Manifest {
	return Manifest{ID: id, Kind: KindSnapshot, Owner: owner, SessionID: "sess-1", Backend: "gvisor",
		RunscVersion: "release-20260905.0", Platform: "systrap", UID: 1500000123, Profiles: []string{"basic", "data_science"},
		Spec: json.RawMessage(`{"env":{"A":"1"},"labels":{"team":"x"}}`), NotSaved: []string{"gen", "sock"}}
}

// The sizes cross the PostgreSQL backend's 1 MiB chunks unevenly.
const (
	sizeA = 3<<20 + 12345
	sizeB = 5 << 20
)

func putTwo(t *testing.T, s *Store, owner, id string) Manifest {
	t.Helper()
	m, err := s.Put(context.Background(), manifest(owner, id),
		BlobSource{"workspace.tar", gen(1, sizeA)}, BlobSource{"pages.img", gen(2, sizeB)})
	if err != nil {
		t.Fatalf("put %s/%s: %v", owner, id, err)
	}
	return m
}

func readBlobSum(t *testing.T, sn *Snapshot, name string) ([32]byte, int64) {
	t.Helper()
	r, err := sn.Blob(name)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		t.Fatalf("reading %s: %v", name, err)
	}
	return [32]byte(h.Sum(nil)), n
}

func testRoundTrip(t *testing.T, e backendEnv) {
	s := e.open(t, Options{})
	put := putTwo(t, s, "alice", "snap-1")
	if put.Size != sizeA+sizeB || len(put.Blobs) != 2 || put.Version != FormatVersion || put.Expires.Sub(put.Created) != DefaultTTL {
		t.Fatalf("stored manifest: %+v", put)
	}
	sn, err := s.Get(context.Background(), "alice", "snap-1")
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Close()
	m := sn.Manifest()
	want := manifest("alice", "snap-1")
	if m.Kind != want.Kind || m.SessionID != want.SessionID || m.Backend != want.Backend || m.RunscVersion != want.RunscVersion ||
		m.Platform != want.Platform || m.UID != want.UID || strings.Join(m.Profiles, ",") != "basic,data_science" ||
		string(m.Spec) != string(want.Spec) || strings.Join(m.NotSaved, ",") != "gen,sock" || !m.Created.Equal(put.Created) {
		t.Fatalf("manifest did not round-trip:\n got %+v\nwant %+v", m, want)
	}
	for _, b := range []struct {
		name string
		seed byte
		size int64
	}{{"workspace.tar", 1, sizeA}, {"pages.img", 2, sizeB}} {
		sum, n := readBlobSum(t, sn, b.name)
		if n != b.size || sum != genSum(b.seed, b.size) {
			t.Fatalf("blob %s: %d bytes, sum differs: %v", b.name, n, sum != genSum(b.seed, b.size))
		}
	}
	// A blob reads again from the start, and an unknown one is not found.
	if sum, _ := readBlobSum(t, sn, "workspace.tar"); sum != genSum(1, sizeA) {
		t.Fatal("second read of a blob differs")
	}
	if _, err := sn.Blob("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown blob: %v", err)
	}
	if st, err := s.Stat(context.Background(), "alice", "snap-1"); err != nil || st.Size != put.Size {
		t.Fatalf("stat: %+v %v", st, err)
	}
}

func testListDelete(t *testing.T, e backendEnv) {
	s := e.open(t, Options{})
	ctx := context.Background()
	for _, id := range []string{"a1", "a2"} {
		if _, err := s.Put(ctx, manifest("alice", id), BlobSource{"x", strings.NewReader(id)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Put(ctx, manifest("bob", "b1"), BlobSource{"x", strings.NewReader("bob")}); err != nil {
		t.Fatal(err)
	}
	ids := func(owner string) string {
		ms, err := s.List(ctx, owner)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range ms {
			out = append(out, m.ID)
		}
		return strings.Join(out, ",")
	}
	if a, b := ids("alice"), ids("bob"); a != "a1,a2" || b != "b1" {
		t.Fatalf("lists: alice %q bob %q", a, b)
	}
	// Bob can neither read nor delete Alice's.
	if _, err := s.Get(ctx, "bob", "a1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bob reads alice's: %v", err)
	}
	if err := s.Delete(ctx, "bob", "a1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bob deletes alice's: %v", err)
	}
	if err := s.Delete(ctx, "alice", "a1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "alice", "a1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if a, b := ids("alice"), ids("bob"); a != "a2" || b != "b1" {
		t.Fatalf("after delete: alice %q bob %q", a, b)
	}
	if n, bytes, err := s.Usage(ctx, "alice"); n != 1 || bytes != 2 || err != nil {
		t.Fatalf("usage: %d %d %v", n, bytes, err)
	}
	if snaps, left := e.stored(t); snaps != 2 || left != 0 {
		t.Fatalf("stored: %d snapshots, %d leftovers; want 2, 0", snaps, left)
	}
}

// mustRefuse checks that Get refuses with want and hands out nothing.
func mustRefuse(t *testing.T, s *Store, owner, id string, want error) {
	t.Helper()
	sn, err := s.Get(context.Background(), owner, id)
	if !errors.Is(err, want) || sn != nil {
		t.Fatalf("Get(%s, %s) = %v, %v; want %v and no snapshot", owner, id, sn, err, want)
	}
}

func testAnotherOwner(t *testing.T, e backendEnv) {
	s := e.open(t, Options{})
	putTwo(t, s, "alice", "s1")
	e.copyToOwner(t, "alice", "mallory", "s1")
	mustRefuse(t, s, "mallory", "s1", ErrTampered)
	if ms, _ := s.List(context.Background(), "mallory"); len(ms) != 0 {
		t.Fatalf("mallory lists %d snapshots", len(ms))
	}
	// Alice's own is intact.
	sn, err := s.Get(context.Background(), "alice", "s1")
	if err != nil {
		t.Fatal(err)
	}
	sn.Close()
}

func testFlippedBlob(t *testing.T, e backendEnv) {
	s := e.open(t, Options{})
	putTwo(t, s, "alice", "s1")
	// The last byte of the second blob: every byte before it would pass.
	e.flipBlob(t, "alice", "s1", "pages.img", sizeB-1)
	mustRefuse(t, s, "alice", "s1", ErrTampered)
	putTwo(t, s, "alice", "s2")
	e.flipBlob(t, "alice", "s2", "workspace.tar", 0)
	mustRefuse(t, s, "alice", "s2", ErrTampered)
}

func testFlippedManifest(t *testing.T, e backendEnv) {
	s := e.open(t, Options{})
	putTwo(t, s, "alice", "s1")
	e.flipManifest(t, "alice", "s1")
	mustRefuse(t, s, "alice", "s1", ErrTampered)
	if _, err := s.Stat(context.Background(), "alice", "s1"); !errors.Is(err, ErrTampered) {
		t.Fatalf("stat: %v", err)
	}
	if ms, _ := s.List(context.Background(), "alice"); len(ms) != 0 {
		t.Fatalf("a tampered snapshot is listed")
	}
	// GC keeps it for the operator (a changed secret must not erase all).
	if st, err := s.GC(context.Background()); err != nil || st.Expired != 0 {
		t.Fatalf("gc: %+v %v", st, err)
	}
	if snaps, _ := e.stored(t); snaps != 1 {
		t.Fatalf("gc removed a snapshot that fails verification")
	}
}

func testLimitMidStream(t *testing.T, e backendEnv) {
	s := e.open(t, Options{MaxBytes: 4 << 20})
	ctx := context.Background()
	w, err := s.Create(ctx, manifest("alice", "big"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := w.Blob("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, gen(1, 3<<20)); err != nil {
		t.Fatal(err)
	}
	out, err = w.Blob("b")
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(out, gen(2, 3<<20))
	if !errors.Is(err, ErrLimit) {
		t.Fatalf("streaming past the limit: %v", err)
	}
	if _, err := w.Commit(); !errors.Is(err, ErrLimit) {
		t.Fatalf("commit after the limit: %v", err)
	}
	if snaps, left := e.stored(t); snaps != 0 || left != 0 {
		t.Fatalf("after the limit: %d snapshots, %d leftovers kept", snaps, left)
	}
	mustRefuse(t, s, "alice", "big", ErrNotFound)
	// Under the limit the owner still writes.
	if _, err := s.Put(ctx, manifest("alice", "small"), BlobSource{"a", gen(3, 1<<20)}); err != nil {
		t.Fatal(err)
	}
	// Put stops the same way.
	if _, err := s.Put(ctx, manifest("alice", "big2"), BlobSource{"a", gen(3, 5<<20)}); !errors.Is(err, ErrLimit) {
		t.Fatalf("put past the limit: %v", err)
	}
	if snaps, left := e.stored(t); snaps != 1 || left != 0 {
		t.Fatalf("after the second limit: %d snapshots, %d leftovers", snaps, left)
	}
}

func testCountLimit(t *testing.T, e backendEnv) {
	s := e.open(t, Options{MaxCount: 2})
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if _, err := s.Put(ctx, manifest("alice", id)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Create(ctx, manifest("alice", "c")); !errors.Is(err, ErrLimit) {
		t.Fatalf("third snapshot: %v", err)
	}
	if _, err := s.Put(ctx, manifest("bob", "c")); err != nil {
		t.Fatalf("another owner's count is its own: %v", err)
	}
}

// Two writers of one owner, each within the limit alone, not together:
// the second to commit is refused, whichever store (replica) it uses.
func testConcurrentLimit(t *testing.T, e backendEnv) {
	s1 := e.open(t, Options{MaxBytes: 6 << 20})
	s2 := e.open(t, Options{MaxBytes: 6 << 20})
	ctx := context.Background()
	w1, err := s1.Create(ctx, manifest("alice", "one"))
	if err != nil {
		t.Fatal(err)
	}
	w2, err := s2.Create(ctx, manifest("alice", "two"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []*Writer{w1, w2} {
		out, err := w.Blob("a")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, gen(1, 4<<20)); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, w := range []*Writer{w1, w2} {
		wg.Go(func() { _, errs[i] = w.Commit() })
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) || !errors.Is(errors.Join(errs...), ErrLimit) {
		t.Fatalf("commits: %v / %v; want exactly one ErrLimit", errs[0], errs[1])
	}
	if snaps, left := e.stored(t); snaps != 1 || left != 0 {
		t.Fatalf("%d snapshots, %d leftovers; want 1, 0", snaps, left)
	}
}

func testTTL(t *testing.T, e backendEnv) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	s := e.open(t, Options{TTL: time.Hour, Now: clock})
	ctx := context.Background()
	putTwo(t, s, "alice", "old")
	short := manifest("alice", "short")
	short.Expires = clock().Add(10 * time.Minute)
	if _, err := s.Put(ctx, short, BlobSource{"x", gen(4, 100)}); err != nil {
		t.Fatal(err)
	}
	long := manifest("alice", "long")
	long.Expires = clock().Add(100 * time.Hour) // capped at the TTL
	if m, err := s.Put(ctx, long); err != nil || !m.Expires.Equal(clock().Add(time.Hour).UTC()) {
		t.Fatalf("expiry capped at the TTL: %v %v", m.Expires, err)
	}
	advance(30 * time.Minute)
	mustRefuse(t, s, "alice", "short", ErrNotFound)
	if st, err := s.GC(ctx); err != nil || st.Expired != 1 {
		t.Fatalf("gc at 30 min: %+v %v", st, err)
	}
	if sn, err := s.Get(ctx, "alice", "old"); err != nil {
		t.Fatalf("old, before its TTL: %v", err)
	} else {
		sn.Close()
	}
	advance(time.Hour)
	mustRefuse(t, s, "alice", "old", ErrNotFound)
	if ms, err := s.List(ctx, "alice"); err != nil || len(ms) != 0 {
		t.Fatalf("expired snapshots listed: %d %v", len(ms), err)
	}
	// Expired ones no longer count against the owner's limits.
	if n, _, _ := s.Usage(ctx, "alice"); n != 0 {
		t.Fatalf("usage counts %d expired snapshots", n)
	}
	if st, err := s.GC(ctx); err != nil || st.Expired != 2 {
		t.Fatalf("gc: %+v %v", st, err)
	}
	if snaps, left := e.stored(t); snaps != 0 || left != 0 {
		t.Fatalf("after GC: %d snapshots, %d leftovers", snaps, left)
	}
}

func testRestart(t *testing.T, e backendEnv) {
	s := e.open(t, Options{})
	putTwo(t, s, "alice", "p1")
	s.Close()
	s2 := e.open(t, Options{})
	sn, err := s2.Get(context.Background(), "alice", "p1")
	if err != nil {
		t.Fatalf("after a restart: %v", err)
	}
	defer sn.Close()
	if sum, _ := readBlobSum(t, sn, "pages.img"); sum != genSum(2, sizeB) {
		t.Fatal("blob differs after a restart")
	}
	// Another secret verifies nothing.
	other := e.open(t, Options{Secret: strings.Repeat("z", 40)})
	mustRefuse(t, other, "alice", "p1", ErrTampered)
}

func testHostile(t *testing.T, e backendEnv) {
	s := e.open(t, Options{})
	ctx := context.Background()
	badIDs := []string{"..", ".", "../x", "../../etc/passwd", "a/b", "/abs", ".hidden", "a\\b", "a\x00b", "a b", "é",
		strings.Repeat("a", MaxIDLen+1), "-lead"}
	for _, id := range badIDs {
		if _, err := s.Create(ctx, manifest("alice", id)); !errors.Is(err, ErrInvalid) {
			t.Errorf("create id %q: %v", id, err)
		}
		if _, err := s.Get(ctx, "alice", id); !errors.Is(err, ErrInvalid) {
			t.Errorf("get id %q: %v", id, err)
		}
		if err := s.Delete(ctx, "alice", id); !errors.Is(err, ErrInvalid) {
			t.Errorf("delete id %q: %v", id, err)
		}
	}
	w, err := s.Create(ctx, manifest("alice", "ok"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Blob("../escape"); !errors.Is(err, ErrInvalid) {
		t.Errorf("blob ../escape: %v", err)
	}
	if _, err := w.Commit(); !errors.Is(err, ErrInvalid) { // the failure aborted it
		t.Errorf("commit after a refused blob: %v", err)
	}
	bad := []func(*Manifest){
		func(m *Manifest) { m.Owner = strings.Repeat("o", MaxOwnerLen+1) },
		func(m *Manifest) { m.Owner = "a\nb" },
		func(m *Manifest) { m.Owner = "\xff" },
		func(m *Manifest) { m.Kind = "other" },
		func(m *Manifest) { m.SessionID = strings.Repeat("s", MaxFieldLen+1) },
		func(m *Manifest) { m.Spec = json.RawMessage(`{"unterminated`) },
		func(m *Manifest) { m.Spec = json.RawMessage(`"` + strings.Repeat("x", MaxSpecLen) + `"`) },
		func(m *Manifest) { m.Profiles = make([]string, MaxProfiles+1) },
		func(m *Manifest) { m.UID = -1 },
	}
	for i, f := range bad {
		m := manifest("alice", fmt.Sprintf("bad%d", i))
		f(&m)
		if _, err := s.Create(ctx, m); !errors.Is(err, ErrInvalid) {
			t.Errorf("bad manifest %d: %v", i, err)
		}
	}
	// Names from sandboxed code are capped, not refused.
	m := manifest("alice", "notsaved")
	m.NotSaved = make([]string, MaxNotSaved+500)
	for i := range m.NotSaved {
		m.NotSaved[i] = strings.Repeat("g", 10_000)
	}
	got, err := s.Put(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.NotSaved) != MaxNotSaved+1 || len(got.NotSaved[0]) != MaxNameLen || got.NotSaved[MaxNotSaved] != "... and 500 more" {
		t.Fatalf("not_saved: %d entries, first %d bytes, last %q", len(got.NotSaved), len(got.NotSaved[0]), got.NotSaved[len(got.NotSaved)-1])
	}
	if snaps, left := e.stored(t); snaps != 1 || left != 0 {
		t.Fatalf("%d snapshots, %d leftovers; want 1, 0", snaps, left)
	}
}

func testExists(t *testing.T, e backendEnv) {
	s := e.open(t, Options{})
	ctx := context.Background()
	if _, err := s.Put(ctx, manifest("alice", "dup"), BlobSource{"a", bytes.NewReader([]byte("one"))}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, manifest("alice", "dup"), BlobSource{"a", bytes.NewReader([]byte("two"))}); !errors.Is(err, ErrExists) {
		t.Fatalf("same id again: %v", err)
	}
	// Another owner's namespace is its own.
	if _, err := s.Put(ctx, manifest("bob", "dup")); err != nil {
		t.Fatal(err)
	}
	// A generated id.
	m, err := s.Put(ctx, manifest("alice", ""))
	if err != nil || checkID(m.ID) != nil {
		t.Fatalf("generated id %q: %v", m.ID, err)
	}
}

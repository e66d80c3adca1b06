package audit

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func openTemp(t *testing.T) (*SQLite, string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "state", "codecage", "audit.db")
	s, err := OpenSQLite(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, p
}

// storeCases run against every Store: SQLite here, PostgreSQL in
// postgres_test.go.
var storeCases = []struct {
	name string
	test func(*testing.T, Store)
}{
	{"RoundTrip", storeRoundTrip},
	{"NewestFirstBreaksTiesByID", storeNewestFirstBreaksTiesByID},
	{"ListFilters", storeListFilters},
	{"Get", storeGet},
	{"Stats", storeStats},
	{"Percentiles", storePercentiles},
	{"BinaryCodeRoundTrips", storeBinaryCodeRoundTrips},
}

func TestAuditSQLiteStore(t *testing.T) {
	for _, c := range storeCases {
		t.Run(c.name, func(t *testing.T) {
			s, _ := openTemp(t)
			c.test(t, s)
		})
	}
}

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func sampleEvents() []Event {
	code := "import socket\nsocket.socket()"
	return []Event{
		{Time: t0, Kind: KindExecute, ExecutionID: "exec-1", Key: "alice", Surface: "rest", Profile: "basic",
			CodeHash: HashCode("print(1)"), Code: "print(1)", Outcome: "success", Duration: 100 * time.Millisecond, RemoteAddr: "127.0.0.1:5000", Backend: "native", Replica: "replica-0"},
		{Time: t0.Add(time.Second), Kind: KindExecute, ExecutionID: "exec-2", Key: "bob", Surface: "mcp", Profile: "basic",
			CodeHash: HashCode(code), Code: code, Outcome: "error", Duration: 200 * time.Millisecond,
			SecurityEvents: []string{"import_denied:socket", "import_denied:ssl", "egress_denied:example.com"}, Detail: "ImportError: socket", Backend: "gvisor", Replica: "replica-1"},
		{Time: t0.Add(2 * time.Second), Kind: KindExecute, ExecutionID: "exec-3", Key: "alice", Surface: "rest", Profile: "data_science",
			CodeHash: HashCode("while True: pass"), Code: "while True: pass", Outcome: "timeout", Duration: 5 * time.Second, Limit: "timeout", Backend: "native"},
		{Time: t0.Add(3 * time.Second), Kind: KindFile, ExecutionID: "exec-3", Key: "alice", Surface: "rest", Outcome: "success", Detail: "wrote out.csv"},
		{Time: t0.Add(4 * time.Second), Kind: KindDenied, Surface: "rest", Outcome: "denied", Detail: "401 unknown key", RemoteAddr: "10.0.0.9:1234"},
		{Time: t0.Add(5 * time.Second), Kind: KindValidate, Surface: "cli", Outcome: "success", CodeHash: HashCode("x = 1"), Code: "x = 1"},
	}
}

func storeRoundTrip(t *testing.T, s Store) {
	ctx := context.Background()
	in := sampleEvents()
	if err := s.Append(ctx, in); err != nil {
		t.Fatal(err)
	}
	for i, ev := range in {
		if ev.ID != int64(i+1) {
			t.Errorf("event %d: ID = %d, want %d", i, ev.ID, i+1)
		}
	}
	got, err := s.List(ctx, Query{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(in) {
		t.Fatalf("List returned %d events, want %d", len(got), len(in))
	}
	// Newest first: the reverse of the insertion order, every field intact.
	for i := range got {
		want := in[len(in)-1-i]
		if !reflect.DeepEqual(got[i], want) {
			t.Errorf("List[%d] =\n%+v\nwant\n%+v", i, got[i], want)
		}
	}
}

func storeNewestFirstBreaksTiesByID(t *testing.T, s Store) {
	ctx := context.Background()
	var evs []Event
	for i := range 5 {
		evs = append(evs, Event{Time: t0, Kind: KindExecute, ExecutionID: string(rune('a' + i))})
	}
	// An older event appended later must still sort after the newer ones.
	evs = append(evs, Event{Time: t0.Add(-time.Hour), Kind: KindExecute, ExecutionID: "old"})
	if err := s.Append(ctx, evs); err != nil {
		t.Fatal(err)
	}
	got, err := s.List(ctx, Query{})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, ev := range got {
		order = append(order, ev.ExecutionID)
	}
	if want := []string{"e", "d", "c", "b", "a", "old"}; !reflect.DeepEqual(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
}

func storeListFilters(t *testing.T, s Store) {
	ctx := context.Background()
	if err := s.Append(ctx, sampleEvents()); err != nil {
		t.Fatal(err)
	}
	ids := func(q Query) []int64 {
		t.Helper()
		evs, err := s.List(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		out := []int64{}
		for _, ev := range evs {
			out = append(out, ev.ID)
		}
		return out
	}
	for _, c := range []struct {
		name string
		q    Query
		want []int64
	}{
		{"kind", Query{Kind: KindExecute}, []int64{3, 2, 1}},
		{"key", Query{Key: "alice"}, []int64{4, 3, 1}},
		{"surface", Query{Surface: "rest"}, []int64{5, 4, 3, 1}},
		{"outcome", Query{Outcome: "success"}, []int64{6, 4, 1}},
		{"backend", Query{Backend: "native"}, []int64{3, 1}},
		{"replica", Query{Replica: "replica-1"}, []int64{2}},
		{"since", Query{Since: t0.Add(3 * time.Second)}, []int64{6, 5, 4}},
		{"limit", Query{Limit: 2}, []int64{6, 5}},
		{"combined", Query{Key: "alice", Kind: KindExecute, Limit: 1}, []int64{3}},
		{"none", Query{Kind: "install"}, []int64{}},
	} {
		if got := ids(c.q); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func storeGet(t *testing.T, s Store) {
	ctx := context.Background()
	if err := s.Append(ctx, sampleEvents()); err != nil {
		t.Fatal(err)
	}
	// An execution's events come oldest first.
	evs, err := s.Get(ctx, "exec-3")
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Kind != KindExecute || evs[1].Kind != KindFile {
		t.Fatalf("Get(exec-3) = %+v", evs)
	}
	for _, ref := range []string{"5", "#5", " 5 "} {
		evs, err := s.Get(ctx, ref)
		if err != nil || len(evs) != 1 || evs[0].ID != 5 || evs[0].Detail != "401 unknown key" {
			t.Errorf("Get(%q) = %+v, %v", ref, evs, err)
		}
	}
	for _, ref := range []string{"exec-404", "", "#", "#99", "0", "-1", "#exec-1"} {
		if _, err := s.Get(ctx, ref); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%q) error = %v, want ErrNotFound", ref, err)
		}
	}
}

func storeStats(t *testing.T, s Store) {
	ctx := context.Background()
	if err := s.Append(ctx, sampleEvents()); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{
		Total:          6,
		First:          t0,
		Last:           t0.Add(5 * time.Second),
		ByKind:         map[string]int64{"execute": 3, "file": 1, "denied": 1, "validate": 1},
		ByOutcome:      map[string]int64{"success": 3, "error": 1, "timeout": 1, "denied": 1},
		ByKey:          map[string]int64{"alice": 3, "bob": 1, "": 2},
		BySurface:      map[string]int64{"rest": 4, "mcp": 1, "cli": 1},
		ByBackend:      map[string]int64{"native": 2, "gvisor": 1},
		ByReplica:      map[string]int64{"replica-0": 1, "replica-1": 1},
		LimitsHit:      map[string]int64{"timeout": 1},
		SecurityEvents: map[string]int64{"import_denied": 2, "egress_denied": 1},
		Executions: DurationStats{Count: 3, Avg: 1766666667, // 5.3s / 3, rounded
			P50: 200 * time.Millisecond, P95: 5 * time.Second, Max: 5 * time.Second},
	}
	if !reflect.DeepEqual(st, want) {
		t.Fatalf("Stats =\n%+v\nwant\n%+v", st, want)
	}

	since := t0.Add(1500 * time.Millisecond)
	st, err = s.Stats(ctx, since)
	if err != nil {
		t.Fatal(err)
	}
	if st.Total != 4 || !st.Since.Equal(since) || !st.First.Equal(t0.Add(2*time.Second)) || st.Executions.Count != 1 ||
		st.Executions.P50 != 5*time.Second || len(st.SecurityEvents) != 0 {
		t.Fatalf("Stats(since) = %+v", st)
	}

	// An empty period has zero figures and empty, non-nil maps.
	st, err = s.Stats(ctx, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if st.Total != 0 || !st.First.IsZero() || st.ByKind == nil || st.Executions != (DurationStats{}) {
		t.Fatalf("Stats(empty) = %+v", st)
	}
}

func storePercentiles(t *testing.T, s Store) {
	ctx := context.Background()
	var evs []Event
	for i := 1; i <= 100; i++ {
		evs = append(evs, Event{Time: t0, Kind: KindExecute, Duration: time.Duration(i) * time.Millisecond})
	}
	evs = append(evs, Event{Time: t0, Kind: KindCommand, Duration: time.Hour}) // not an execution
	if err := s.Append(ctx, evs); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	want := DurationStats{Count: 100, Avg: 50500 * time.Microsecond, P50: 50 * time.Millisecond, P95: 95 * time.Millisecond, Max: 100 * time.Millisecond}
	if st.Executions != want {
		t.Fatalf("Executions = %+v, want %+v", st.Executions, want)
	}
}

func storeBinaryCodeRoundTrips(t *testing.T, s Store) {
	ctx := context.Background()
	code := "print('a\x00b')\xff\xfe\x00\xc3\x28 tail"
	detail := "err\x00\x80\n\x1b[31mred"
	ev := []Event{{Time: t0, Kind: KindExecute, ExecutionID: "bin", Code: code, CodeHash: HashCode(code), Detail: detail,
		SecurityEvents: []string{"import_denied:so\x00cket"}}}
	if err := s.Append(ctx, ev); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, "bin")
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Code != code || got[0].Detail != detail || got[0].CodeHash != HashCode(code) {
		t.Fatalf("got code %q detail %q", got[0].Code, got[0].Detail)
	}
	// PostgreSQL's text and JSON refuse NUL: it is stored as U+FFFD there.
	want := "import_denied:so\x00cket"
	if _, ok := s.(*Postgres); ok {
		want = "import_denied:so\uFFFDcket"
	}
	if len(got[0].SecurityEvents) != 1 || got[0].SecurityEvents[0] != want {
		t.Fatalf("security events %q", got[0].SecurityEvents)
	}
	if _, err := s.Stats(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
}

func TestAuditReopen(t *testing.T) {
	s, p := openTemp(t)
	ctx := context.Background()
	if err := s.Append(ctx, sampleEvents()[:2]); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := OpenSQLite(p)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	evs := sampleEvents()[2:3]
	if err := s2.Append(ctx, evs); err != nil {
		t.Fatal(err)
	}
	if evs[0].ID != 3 {
		t.Fatalf("ID after reopen = %d, want 3", evs[0].ID)
	}
	got, err := s2.List(ctx, Query{})
	if err != nil || len(got) != 3 {
		t.Fatalf("List after reopen: %d events, %v", len(got), err)
	}
	if v, err := s2.userVersion(ctx); err != nil || v != schemaVersion {
		t.Fatalf("user_version = %d, %v", v, err)
	}
	var mode string
	if err := s2.db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v", mode, err)
	}
}

func TestAuditFileModes(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a", "b", "audit.db")
	s, err := OpenSQLite(p)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for path, want := range map[string]fs.FileMode{p: 0o600, filepath.Dir(p): 0o700 | fs.ModeDir, filepath.Join(dir, "a"): 0o700 | fs.ModeDir} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode(), want)
		}
	}
}

func TestAuditUnusualPath(t *testing.T) {
	p := filepath.Join(t.TempDir(), "we?ird #dir 100%", "audit.db")
	s, err := OpenSQLite(p)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Append(context.Background(), sampleEvents()[:1]); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("database not at the path given: %v", err)
	}
}

func TestAuditReadOnly(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope", "audit.db")
	if _, err := OpenSQLiteReadOnly(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("OpenSQLiteReadOnly(missing) error = %v, want fs.ErrNotExist", err)
	}
	if _, err := os.Stat(filepath.Dir(missing)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("opening read-only created %s", filepath.Dir(missing))
	}

	w, p := openTemp(t)
	ctx := context.Background()
	if err := w.Append(ctx, sampleEvents()); err != nil {
		t.Fatal(err)
	}
	r, err := OpenSQLiteReadOnly(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// The reader sees the writer's later commits (WAL, both open).
	if err := w.Append(ctx, []Event{{Time: t0.Add(time.Minute), Kind: KindSession}}); err != nil {
		t.Fatal(err)
	}
	evs, err := r.List(ctx, Query{Limit: 1})
	if err != nil || len(evs) != 1 || evs[0].Kind != KindSession {
		t.Fatalf("read-only List = %+v, %v", evs, err)
	}
	if _, err := r.Stats(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := r.Append(ctx, sampleEvents()[:1]); err == nil {
		t.Fatal("Append on a read-only store succeeded")
	}

	// A file that is not an audit database is refused, not modified.
	empty := filepath.Join(t.TempDir(), "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenSQLiteReadOnly(empty); err == nil {
		t.Fatal("OpenSQLiteReadOnly accepted an empty file")
	}
}

// A database written by a build of schema 1 (no backend column) is read
// as it is by `codecage audit`, and upgraded in place by the server.
func TestAuditUpgradesSchemaOne(t *testing.T) {
	p := filepath.Join(t.TempDir(), "audit.db")
	old, err := open(p, fileURI(p))
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range migrations[0] {
		if _, err := old.db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := old.db.Exec(`PRAGMA user_version = 1`); err != nil {
		t.Fatal(err)
	}
	if _, err := old.db.Exec(`INSERT INTO events (time_ns, kind, outcome) VALUES (?, 'execute', 'success')`, t0.UnixNano()); err != nil {
		t.Fatal(err)
	}
	old.Close()
	ctx := context.Background()

	r, err := OpenSQLiteReadOnly(p)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := r.List(ctx, Query{})
	if err != nil || len(evs) != 1 || evs[0].Backend != "" || evs[0].Outcome != "success" {
		t.Fatalf("schema 1, read-only: %+v %v", evs, err)
	}
	if evs, err := r.List(ctx, Query{Backend: "native"}); err != nil || len(evs) != 0 {
		t.Fatalf("schema 1, by backend: %+v %v", evs, err)
	}
	if st, err := r.Stats(ctx, time.Time{}); err != nil || st.Total != 1 || len(st.ByBackend) != 0 {
		t.Fatalf("schema 1, stats: %+v %v", st, err)
	}
	r.Close()

	w, err := OpenSQLite(p)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if v, err := w.userVersion(ctx); err != nil || v != schemaVersion {
		t.Fatalf("after upgrade: user_version %d, %v", v, err)
	}
	if err := w.Append(ctx, []Event{{Time: t0.Add(time.Second), Kind: KindExecute, Outcome: "success", Backend: "gvisor"}}); err != nil {
		t.Fatal(err)
	}
	evs, err = w.List(ctx, Query{})
	if err != nil || len(evs) != 2 || evs[0].Backend != "gvisor" || evs[1].Backend != "" {
		t.Fatalf("after upgrade: %+v %v", evs, err)
	}
	if st, err := w.Stats(ctx, time.Time{}); err != nil || !reflect.DeepEqual(st.ByBackend, map[string]int64{"gvisor": 1}) {
		t.Fatalf("after upgrade, stats: %+v %v", st.ByBackend, err)
	}
}

func TestAuditRefusesNewerSchema(t *testing.T) {
	s, p := openTemp(t)
	if _, err := s.db.Exec("PRAGMA user_version = 99"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := OpenSQLite(p); err == nil {
		t.Fatal("OpenSQLite accepted a newer schema")
	}
	if _, err := OpenSQLiteReadOnly(p); err == nil {
		t.Fatal("OpenSQLiteReadOnly accepted a newer schema")
	}
}

func TestAuditHashCode(t *testing.T) {
	if got := HashCode(""); got != "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Fatalf("HashCode(\"\") = %s", got)
	}
}

func TestAuditDefaultPath(t *testing.T) {
	// SANDBOX_AUDIT_DB is the config loader's (codecage audit: --db's
	// default); the default path ignores it.
	t.Setenv("SANDBOX_AUDIT_DB", "/srv/audit/x.db")
	t.Setenv("XDG_STATE_HOME", "/xdg/state")
	if got := DefaultPath(); got != "/xdg/state/codecage/audit.db" {
		t.Errorf("with XDG_STATE_HOME: %s", got)
	}
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", "/home/someone")
	if got := DefaultPath(); got != "/home/someone/.local/state/codecage/audit.db" {
		t.Errorf("with HOME: %s", got)
	}
	// A relative XDG_STATE_HOME is invalid per the spec and ignored.
	t.Setenv("XDG_STATE_HOME", "relative/state")
	if got := DefaultPath(); got != "/home/someone/.local/state/codecage/audit.db" {
		t.Errorf("with relative XDG_STATE_HOME: %s", got)
	}
	t.Setenv("HOME", "")
	if got := DefaultPath(); got != "/var/lib/codecage/audit.db" {
		t.Errorf("without HOME: %s", got)
	}
}

package audit

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/pgtest"
)

// An events table of another shape under this program's schema version is
// refused at open (for writing and for reading), naming what is missing.
func TestAuditSQLiteRefusesATableOfAnotherShape(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	conn, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"CREATE TABLE events (id INTEGER PRIMARY KEY, time_ns INTEGER, kind TEXT)", "PRAGMA user_version = 3"} {
		if _, err := conn.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close()
	for name, open := range map[string]func(string) (*SQLite, error){"write": OpenSQLite, "read": OpenSQLiteReadOnly} {
		s, err := open(path)
		if err == nil {
			s.Close()
			t.Fatalf("%s: opened", name)
		}
		if !strings.Contains(err.Error(), "lacks the columns execution_id,") || !strings.Contains(err.Error(), "replica") || strings.Contains(err.Error(), "kind,") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// The file removed (or replaced) under an open store: writes fail, saying
// so, instead of going to a file no path leads to.
func TestAuditSQLiteNoticesItsFileGone(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.db")
	s, err := OpenSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if err := s.Append(ctx, []Event{{Kind: KindExecute}}); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path, path+".old"); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, []Event{{Kind: KindExecute}}); !errors.Is(err, ErrFileGone) {
		t.Fatalf("append after delete: %v", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, ErrFileGone) {
		t.Fatalf("ping after delete: %v", err)
	}
	// Another file at the path is not the one open either.
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, []Event{{Kind: KindExecute}}); !errors.Is(err, ErrFileGone) || !strings.Contains(err.Error(), "another file") {
		t.Fatalf("append after replace: %v", err)
	}
}

// The same for PostgreSQL: a table of another shape is refused at open.
func TestAuditPostgresRefusesATableOfAnotherShape(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := pgDatabase(t, srv)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"CREATE TABLE codecage_audit_schema (version INTEGER NOT NULL)", "INSERT INTO codecage_audit_schema VALUES (1)",
		"CREATE TABLE codecage_audit_events (id BIGINT, message TEXT)",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	if s, err := OpenPostgres(context.Background(), dsn, 10*time.Second); err == nil || !strings.Contains(err.Error(), "lacks the columns time_ns") {
		if s != nil {
			s.Close()
		}
		t.Fatalf("write: %v", err)
	}
	if s, err := OpenPostgresReadOnly(context.Background(), dsn, 10*time.Second); err == nil || !strings.Contains(err.Error(), "lacks the columns time_ns") {
		if s != nil {
			s.Close()
		}
		t.Fatalf("read: %v", err)
	}
}

// A write the store refuses (the events are lost) makes the recorder say
// so until a write succeeds again.
func TestRecorderFailingUntilAWriteSucceeds(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.db")
	s, err := OpenSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := NewRecorder(s, 16, nil)
	defer r.Close(context.Background())
	ctx := context.Background()
	r.Record(Event{Kind: KindExecute})
	if err := r.Flush(ctx); err != nil || r.Failing() != nil {
		t.Fatalf("flush %v, failing %v", err, r.Failing())
	}
	if err := os.Rename(path, path+".moved"); err != nil {
		t.Fatal(err)
	}
	r.Record(Event{Kind: KindExecute})
	if err := r.Flush(ctx); !errors.Is(err, ErrFileGone) {
		t.Fatalf("flush after the move: %v", err)
	}
	if err := r.Failing(); !errors.Is(err, ErrFileGone) || !strings.Contains(err.Error(), "1 dropped") {
		t.Fatalf("failing: %v", err)
	}
	if err := os.Rename(path+".moved", path); err != nil {
		t.Fatal(err)
	}
	r.Record(Event{Kind: KindExecute})
	if err := r.Flush(ctx); err != nil || r.Failing() != nil {
		t.Fatalf("back: flush %v, failing %v", err, r.Failing())
	}
}

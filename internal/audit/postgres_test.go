package audit

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/pgtest"
)

// pgDatabase creates a fresh database on srv and returns its URL.
func pgDatabase(t *testing.T, srv *pgtest.Server) string {
	t.Helper()
	db, err := sql.Open("pgx", srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	name := fmt.Sprintf("t%d", dbSeq.Add(1))
	if _, err := db.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	return strings.Replace(srv.DSN(), "/postgres?", "/"+name+"?", 1)
}

var dbSeq atomic.Int64

func openPG(t *testing.T, dsn string) *Postgres {
	t.Helper()
	s, err := OpenPostgres(context.Background(), dsn, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestAuditPostgresStore(t *testing.T) {
	srv := pgtest.Start(t)
	for _, c := range storeCases {
		t.Run(c.name, func(t *testing.T) {
			c.test(t, openPG(t, pgDatabase(t, srv)))
		})
	}
}

// Replicas that start together migrate the schema once, and none fails.
func TestAuditPostgresConcurrentMigration(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := pgDatabase(t, srv)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			s, err := OpenPostgres(context.Background(), dsn, 10*time.Second)
			if err == nil {
				err = s.Append(context.Background(), []Event{{Kind: KindExecute}})
				s.Close()
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	s := openPG(t, dsn)
	var rows, version int
	if err := s.DB().QueryRow("SELECT count(*), max(version) FROM codecage_audit_schema").Scan(&rows, &version); err != nil {
		t.Fatal(err)
	}
	if rows != postgresSchemaVersion || version != postgresSchemaVersion {
		t.Fatalf("schema table has %d rows, version %d; want each migration recorded once", rows, version)
	}
	evs, err := s.List(context.Background(), Query{})
	if err != nil || len(evs) != 8 {
		t.Fatalf("List = %d events, %v; want 8", len(evs), err)
	}
}

// `codecage audit` reads without creating or changing the schema.
func TestAuditPostgresReadOnly(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := pgDatabase(t, srv)
	if _, err := OpenPostgresReadOnly(context.Background(), dsn, 5*time.Second); err == nil || !strings.Contains(err.Error(), "no audit schema") {
		t.Fatalf("read-only open of an empty database: %v", err)
	}
	w := openPG(t, dsn)
	if err := w.Append(context.Background(), sampleEvents()); err != nil {
		t.Fatal(err)
	}
	r, err := OpenPostgresReadOnly(context.Background(), dsn, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	st, err := r.Stats(context.Background(), time.Time{})
	if err != nil || st.Total != int64(len(sampleEvents())) {
		t.Fatalf("Stats = %+v, %v", st, err)
	}
}

// A database that does not answer is a clear error at once, naming it and
// keeping its password out of the message.
func TestAuditPostgresUnreachable(t *testing.T) {
	start := time.Now()
	_, err := OpenPostgres(context.Background(), "postgres://u:secretpw@127.0.0.1:1/audit?sslmode=disable", 3*time.Second)
	if err == nil {
		t.Fatal("opened a database that is not there")
	}
	msg := err.Error()
	if !strings.Contains(msg, "127.0.0.1:1/audit") || strings.Contains(msg, "secretpw") {
		t.Fatalf("error %q: want the address and no password", msg)
	}
	if time.Since(start) > 30*time.Second {
		t.Fatalf("took %s to fail", time.Since(start))
	}
	if _, err := OpenPostgres(context.Background(), "postgres://u:secretpw@[::1:5432/x", time.Second); err == nil || strings.Contains(err.Error(), "secretpw") {
		t.Fatalf("bad URL: %v", err)
	}
}

// While PostgreSQL is down, events wait in the buffer; those that find it
// full are dropped and counted; when it returns, the backlog is written
// and the loss is on record.
func TestAuditRecorderHoldsThroughOutage(t *testing.T) {
	srv := pgtest.Start(t)
	s := openPG(t, pgDatabase(t, srv))
	const buffer = 16
	r := NewRecorder(s, buffer, nil)
	ctx := context.Background()
	for i := range 10 {
		r.Record(Event{Kind: KindExecute, ExecutionID: fmt.Sprintf("before-%d", i)})
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	srv.Stop()
	r.Record(Event{Kind: KindExecute, ExecutionID: "stuck"})
	deadline := time.Now().Add(30 * time.Second)
	for !r.Unavailable() {
		if time.Now().After(deadline) {
			t.Fatal("the recorder never noticed the database was down")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The writer holds "stuck"; the buffer takes 16 more; 14 are dropped.
	for i := range 30 {
		r.Record(Event{Kind: KindExecute, ExecutionID: fmt.Sprintf("during-%d", i)})
	}
	if r.Dropped() != 14 || r.Buffered() != buffer {
		t.Fatalf("during the outage: dropped %d, buffered %d; want 14, %d", r.Dropped(), r.Buffered(), buffer)
	}

	srv.Start()
	fctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := r.Flush(fctx); err != nil {
		t.Fatal(err)
	}
	if r.Unavailable() {
		t.Fatal("still unavailable after the database returned")
	}
	if r.Written() != 10+1+buffer {
		t.Fatalf("written %d, want %d", r.Written(), 10+1+buffer)
	}
	for _, id := range []string{"before-9", "stuck", "during-0", "during-15"} {
		if _, err := s.Get(ctx, id); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
	if got := droppedIn(t, s); got != 14 {
		t.Fatalf("audit_dropped records report %d, want 14", got)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

package snapstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/pgtest"
	_ "github.com/jackc/pgx/v5/stdlib"
)

var dbSeq atomic.Int64

// pgDatabase creates a fresh database on srv and returns its URL.
func pgDatabase(t testing.TB, srv *pgtest.Server) string {
	t.Helper()
	db := sqlOpen(t, srv.DSN())
	name := fmt.Sprintf("snap%d", dbSeq.Add(1))
	if _, err := db.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	return strings.Replace(srv.DSN(), "/postgres?", "/"+name+"?", 1)
}

func sqlOpen(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func pgEnv(t *testing.T, srv *pgtest.Server) backendEnv {
	dsn := pgDatabase(t, srv)
	db := sqlOpen(t, dsn)
	exec := func(t *testing.T, q string, args ...any) {
		t.Helper()
		if res, err := db.Exec(q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		} else if n, _ := res.RowsAffected(); n == 0 {
			t.Fatalf("%s: no row changed", q)
		}
	}
	return backendEnv{
		open: func(t *testing.T, o Options) *Store {
			o.DSN = dsn
			if o.Secret == "" {
				o.Secret = testSecret
			}
			s, err := Open(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		flipBlob: func(t *testing.T, owner, id, blob string, off int64) {
			seq, at := off/chunkSize, off%chunkSize
			exec(t, `UPDATE codecage_snapshot_chunks SET data = set_byte(data, $5, get_byte(data, $5) # 1)
				WHERE owner = $1 AND id = $2 AND blob = $3 AND seq = $4`, owner, id, blob, seq, at)
		},
		flipManifest: func(t *testing.T, owner, id string) {
			// The uid's last digit: 1500000123 -> 1500000122.
			exec(t, `UPDATE codecage_snapshots SET manifest = set_byte(manifest, position('"uid":' in convert_from(manifest, 'UTF8')) + 14,
				get_byte(manifest, position('"uid":' in convert_from(manifest, 'UTF8')) + 14) # 1) WHERE owner = $1 AND id = $2`, owner, id)
		},
		copyToOwner: func(t *testing.T, from, to, id string) {
			exec(t, `INSERT INTO codecage_snapshots SELECT $2, id, size, expires_ns, manifest, seal FROM codecage_snapshots WHERE owner = $1 AND id = $3`, from, to, id)
			exec(t, `INSERT INTO codecage_snapshot_chunks SELECT $2, id, blob, seq, data FROM codecage_snapshot_chunks WHERE owner = $1 AND id = $3`, from, to, id)
		},
		stored: func(t *testing.T) (int, int) {
			var snaps, orphans int
			if err := db.QueryRow(`SELECT count(*) FROM codecage_snapshots`).Scan(&snaps); err != nil {
				t.Fatal(err)
			}
			// Chunks not of a snapshot's blob (the foreign key should make
			// this impossible), and rows never finished.
			err := db.QueryRow(`SELECT (SELECT count(*) FROM codecage_snapshot_chunks c WHERE NOT EXISTS
				(SELECT 1 FROM codecage_snapshots s WHERE s.owner = c.owner AND s.id = c.id AND position(('"name":"' || c.blob || '"')::bytea in s.manifest) > 0))
				+ (SELECT count(*) FROM codecage_snapshots WHERE seal = '')`).Scan(&orphans)
			if err != nil {
				t.Fatal(err)
			}
			return snaps, orphans
		},
	}
}

func TestPostgresStore(t *testing.T) {
	srv := pgtest.Start(t)
	for _, c := range storeCases {
		t.Run(c.name, func(t *testing.T) { c.test(t, pgEnv(t, srv)) })
	}
}

// The PostgreSQL store is shared by replicas: it refuses to open without
// the secret they all share.
func TestPostgresNeedsTheSecret(t *testing.T) {
	_, err := Open(context.Background(), Options{DSN: "postgres://u@127.0.0.1:1/x", SecretFile: t.TempDir() + "/s"})
	if !errors.Is(err, ErrNoSecret) || !strings.Contains(err.Error(), "SANDBOX_SNAPSHOT_SECRET") {
		t.Fatalf("no secret: %v", err)
	}
}

// A database that goes away is ErrUnavailable within the timeout, never a
// hang, and the store works again when it is back.
func TestPostgresGoesAway(t *testing.T) {
	srv := pgtest.Start(t)
	e := pgEnv(t, srv)
	s := e.open(t, Options{Timeout: 2 * time.Second})
	putTwo(t, s, "alice", "s1")
	srv.Stop()
	ctx := context.Background()
	for name, op := range map[string]func() error{
		"list": func() error { _, err := s.List(ctx, "alice"); return err },
		"get":  func() error { _, err := s.Get(ctx, "alice", "s1"); return err },
		"put": func() error {
			_, err := s.Put(ctx, manifest("alice", "s2"), BlobSource{"a", gen(1, 3<<20)})
			return err
		},
		"delete": func() error { return s.Delete(ctx, "alice", "s1") },
		"gc":     func() error { _, err := s.GC(ctx); return err },
	} {
		start := time.Now()
		err := op()
		if !errors.Is(err, ErrUnavailable) || time.Since(start) > 10*time.Second {
			t.Errorf("%s with the database down: %v after %s", name, err, time.Since(start))
		}
	}
	if _, err := Open(ctx, Options{DSN: pgDatabase2(srv), Secret: testSecret, Timeout: 2 * time.Second}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("open with the database down: %v", err)
	}
	srv.Start()
	sn, err := s.Get(ctx, "alice", "s1")
	if err != nil {
		t.Fatalf("after the database returned: %v", err)
	}
	sn.Close()
}

// pgDatabase2 is the server's default database's URL (no CREATE needed).
func pgDatabase2(srv *pgtest.Server) string { return srv.DSN() }

// A write whose connection dies leaves nothing: the transaction rolls back.
func TestPostgresInterruptedWriteLeavesNothing(t *testing.T) {
	srv := pgtest.Start(t)
	e := pgEnv(t, srv)
	s := e.open(t, Options{Timeout: 2 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	w, err := s.Create(ctx, manifest("alice", "half"))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := w.Blob("a")
	if _, err := out.Write(make([]byte, 3<<20)); err != nil {
		t.Fatal(err)
	}
	cancel() // the caller goes away mid-stream
	if _, err := out.Write(make([]byte, 1)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("write after cancel: %v", err)
	}
	if snaps, left := e.stored(t); snaps != 0 || left != 0 {
		t.Fatalf("%d snapshots, %d leftovers after an interrupted write", snaps, left)
	}
}

package snapstore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// The PostgreSQL backend: the database replicas share (the audit log's,
// SANDBOX_AUDIT_DB). A snapshot is a row of codecage_snapshots (the sealed
// manifest) and its blobs' bytes in rows of codecage_snapshot_chunks, 1 MiB
// each, written in one transaction: a half-written snapshot is never
// visible, and a writer that dies (or loses its connection) leaves nothing,
// as the transaction rolls back.
//
// Chunked bytea rows rather than large objects: they are deleted with the
// snapshot's row (ON DELETE CASCADE; a large object outlives the row that
// names it until someone calls lo_unlink or vacuumlo), they need no
// privileges beyond the two tables, they travel with logical replication and
// plain pg_dump of the tables, and they read back from inside a REPEATABLE
// READ transaction with ordinary queries. Their storage is EXTERNAL: images
// and pickles do not compress, so PostgreSQL does not try.
type pgBackend struct {
	db      *sql.DB
	name    string
	timeout time.Duration
}

// chunkSize is the bytes of one chunk row.
const chunkSize = 1 << 20

// Advisory lock keys (two-int4 form, apart from the audit log's bigint
// key): class pgLockClass with an owner's hash orders that owner's commits;
// pgMigrateClass orders schema creation.
const (
	pgLockClass    = 0x736e6170 // "snap"
	pgMigrateClass = 0x736e6171
)

var pgSchema = []string{
	`CREATE TABLE IF NOT EXISTS codecage_snapshots (
		owner      TEXT   NOT NULL,
		id         TEXT   NOT NULL,
		size       BIGINT NOT NULL DEFAULT 0,
		expires_ns BIGINT NOT NULL DEFAULT 0,
		manifest   BYTEA  NOT NULL DEFAULT '',
		seal       BYTEA  NOT NULL DEFAULT '',
		PRIMARY KEY (owner, id)
	)`,
	`CREATE INDEX IF NOT EXISTS codecage_snapshots_expires ON codecage_snapshots (expires_ns)`,
	`CREATE TABLE IF NOT EXISTS codecage_snapshot_chunks (
		owner TEXT    NOT NULL,
		id    TEXT    NOT NULL,
		blob  TEXT    NOT NULL,
		seq   INTEGER NOT NULL,
		data  BYTEA   NOT NULL,
		PRIMARY KEY (owner, id, blob, seq),
		FOREIGN KEY (owner, id) REFERENCES codecage_snapshots (owner, id) ON DELETE CASCADE
	)`,
	`ALTER TABLE codecage_snapshot_chunks ALTER COLUMN data SET STORAGE EXTERNAL`,
}

func openPostgres(ctx context.Context, dsn string, timeout time.Duration) (*pgBackend, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgconn's message quotes the URL, password included: say less.
		return nil, fmt.Errorf("%w: the PostgreSQL URL does not parse (postgres://user:password@host:port/database?sslmode=...)", ErrInvalid)
	}
	name := fmt.Sprintf("postgres %s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
	if cfg.ConnectTimeout == 0 || cfg.ConnectTimeout > timeout {
		cfg.ConnectTimeout = timeout
	}
	db := sql.OpenDB(stdlib.GetConnector(*cfg))
	// Each write and each open Snapshot holds a connection for its life.
	db.SetMaxOpenConns(16)
	db.SetConnMaxIdleTime(time.Minute)
	p := &pgBackend{db: db, name: name, timeout: timeout}
	if err := p.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return p, nil
}

func (p *pgBackend) migrate(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	// Made already: nothing to lock. (ALTER TABLE would wait for every
	// open read of a snapshot.)
	var made bool
	err := p.db.QueryRowContext(ctx, `SELECT to_regclass('codecage_snapshot_chunks') IS NOT NULL`).Scan(&made)
	if err != nil {
		return p.fail("reading the snapshot tables", err)
	}
	if made {
		return nil
	}
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return p.fail("creating the snapshot tables", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1, 0)`, pgMigrateClass); err != nil {
		return p.fail("creating the snapshot tables", err)
	}
	for _, q := range pgSchema {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return p.fail("creating the snapshot tables", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return p.fail("creating the snapshot tables", err)
	}
	return nil
}

func (p *pgBackend) close() error { return p.db.Close() }

// fail classifies a database error: every failure of the database is
// ErrUnavailable to the caller, with the driver's words for the operator.
func (p *pgBackend) fail(what string, err error) error {
	return fmt.Errorf("%w: %s on %s: %v", ErrUnavailable, what, p.name, err)
}

// op bounds one statement: a database that went away fails it in time.
func (p *pgBackend) op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, p.timeout)
}

func (p *pgBackend) list(ctx context.Context, owner string) ([]record, error) {
	return p.records(ctx, p.db, owner, "")
}

type querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

// records reads the owner's committed records, except id's.
func (p *pgBackend) records(ctx context.Context, q querier, owner, except string) ([]record, error) {
	ctx, cancel := p.op(ctx)
	defer cancel()
	rows, err := q.QueryContext(ctx, `SELECT manifest, seal FROM codecage_snapshots WHERE owner = $1 AND id <> $2`, owner, except)
	if err != nil {
		return nil, p.fail("listing snapshots", err)
	}
	defer rows.Close()
	var out []record
	for rows.Next() {
		var r record
		if err := rows.Scan(&r.raw, &r.seal); err != nil {
			return nil, p.fail("listing snapshots", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, p.fail("listing snapshots", err)
	}
	return out, nil
}

func (p *pgBackend) read(ctx context.Context, owner, id string) (view, error) {
	// One view of the database for the verification and every read after.
	tx, err := p.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return nil, p.fail("reading snapshot "+id, err)
	}
	qctx, cancel := p.op(ctx)
	defer cancel()
	var r record
	err = tx.QueryRowContext(qctx, `SELECT manifest, seal FROM codecage_snapshots WHERE owner = $1 AND id = $2`, owner, id).Scan(&r.raw, &r.seal)
	if err != nil {
		tx.Rollback()
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		return nil, p.fail("reading snapshot "+id, err)
	}
	return &pgView{p: p, tx: tx, rec: r, owner: owner, id: id}, nil
}

// pgView reads a snapshot inside one REPEATABLE READ transaction.
type pgView struct {
	p         *pgBackend
	tx        *sql.Tx
	rec       record
	owner, id string
	mu        sync.Mutex // one statement at a time on the transaction's connection
}

func (v *pgView) record() record { return v.rec }

func (v *pgView) blob(ctx context.Context, name string, size int64) (io.Reader, error) {
	return &chunkReader{v: v, ctx: ctx, name: name, left: size}, nil
}

func (v *pgView) close() error { return v.tx.Rollback() }

// chunk reads chunk seq of a blob.
func (v *pgView) chunk(ctx context.Context, name string, seq int) ([]byte, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	ctx, cancel := v.p.op(ctx)
	defer cancel()
	var data []byte
	err := v.tx.QueryRowContext(ctx, `SELECT data FROM codecage_snapshot_chunks WHERE owner = $1 AND id = $2 AND blob = $3 AND seq = $4`,
		v.owner, v.id, name, seq).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: blob %s lacks chunk %d", ErrTampered, name, seq)
	}
	if err != nil {
		return nil, v.p.fail("reading blob "+name, err)
	}
	return data, nil
}

// chunkReader streams a blob chunk by chunk (one chunk in memory).
type chunkReader struct {
	v    *pgView
	ctx  context.Context
	name string
	seq  int
	left int64 // sealed bytes not yet fetched
	buf  []byte
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.buf) == 0 {
		if c.left == 0 {
			return 0, io.EOF
		}
		data, err := c.v.chunk(c.ctx, c.name, c.seq)
		if err != nil {
			return 0, err
		}
		if want := min(c.left, chunkSize); int64(len(data)) != want {
			return 0, fmt.Errorf("%w: blob %s chunk %d is %d bytes, want %d", ErrTampered, c.name, c.seq, len(data), want)
		}
		c.buf, c.left, c.seq = data, c.left-int64(len(data)), c.seq+1
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}

func (p *pgBackend) begin(ctx context.Context, owner, id string) (txn, error) {
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, p.fail("starting a snapshot", err)
	}
	qctx, cancel := p.op(ctx)
	defer cancel()
	// The row exists from the start (the chunks reference it) but no other
	// transaction sees it before commit.
	if _, err := tx.ExecContext(qctx, `INSERT INTO codecage_snapshots (owner, id) VALUES ($1, $2)`, owner, id); err != nil {
		tx.Rollback()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			return nil, fmt.Errorf("%w: %s", ErrExists, id)
		}
		return nil, p.fail("starting a snapshot", err)
	}
	return &pgTxn{p: p, tx: tx, owner: owner, id: id}, nil
}

type pgTxn struct {
	p         *pgBackend
	tx        *sql.Tx
	owner, id string
	done      bool
}

func (t *pgTxn) blob(ctx context.Context, name string) (io.WriteCloser, error) {
	return &chunkWriter{t: t, ctx: ctx, name: name, buf: make([]byte, 0, chunkSize)}, nil
}

// chunkWriter gathers a blob into chunks and inserts each when full.
type chunkWriter struct {
	t    *pgTxn
	ctx  context.Context
	name string
	seq  int
	buf  []byte
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := copy(c.buf[len(c.buf):cap(c.buf)], p)
		c.buf, p, n = c.buf[:len(c.buf)+k], p[k:], n+k
		if len(c.buf) == cap(c.buf) {
			if err := c.flush(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

func (c *chunkWriter) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	ctx, cancel := c.t.p.op(c.ctx)
	defer cancel()
	_, err := c.t.tx.ExecContext(ctx, `INSERT INTO codecage_snapshot_chunks (owner, id, blob, seq, data) VALUES ($1, $2, $3, $4, $5)`,
		c.t.owner, c.t.id, c.name, c.seq, c.buf)
	if err != nil {
		return c.t.p.fail("writing blob "+c.name, err)
	}
	c.seq++
	c.buf = c.buf[:0]
	return nil
}

func (c *chunkWriter) Close() error { return c.flush() }

// ownerLock is the advisory lock key of an owner's commits.
func ownerLock(owner string) int32 {
	h := sha256.Sum256([]byte(owner))
	return int32(binary.BigEndian.Uint32(h[:4]))
}

func (t *pgTxn) commit(ctx context.Context, rec record, m Manifest, check func([]record) error) error {
	qctx, cancel := t.p.op(ctx)
	defer cancel()
	// Held to the end of the transaction: the owner's commits, from every
	// replica, pass the limit check one at a time.
	if _, err := t.tx.ExecContext(qctx, `SELECT pg_advisory_xact_lock($1, $2)`, pgLockClass, ownerLock(t.owner)); err != nil {
		return t.p.fail("committing a snapshot", err)
	}
	recs, err := t.p.records(ctx, t.tx, t.owner, t.id)
	if err != nil {
		return err
	}
	if err := check(recs); err != nil {
		return err
	}
	_, err = t.tx.ExecContext(qctx, `UPDATE codecage_snapshots SET size = $3, expires_ns = $4, manifest = $5, seal = $6 WHERE owner = $1 AND id = $2`,
		t.owner, t.id, m.Size, m.Expires.UnixNano(), rec.raw, rec.seal)
	if err != nil {
		return t.p.fail("committing a snapshot", err)
	}
	if err := t.tx.Commit(); err != nil {
		return t.p.fail("committing a snapshot", err)
	}
	t.done = true
	return nil
}

func (t *pgTxn) abort() {
	if !t.done {
		t.done = true
		t.tx.Rollback()
	}
}

func (p *pgBackend) remove(ctx context.Context, owner, id string) error {
	ctx, cancel := p.op(ctx)
	defer cancel()
	res, err := p.db.ExecContext(ctx, `DELETE FROM codecage_snapshots WHERE owner = $1 AND id = $2`, owner, id)
	if err != nil {
		return p.fail("deleting snapshot "+id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return nil
}

// sweep removes the expired snapshots. Orphaned chunks cannot exist (the
// foreign key deletes them with their snapshot, and an unfinished write's
// rows vanish with its transaction); the space of rolled-back writes is
// PostgreSQL's autovacuum's to reclaim.
func (p *pgBackend) sweep(ctx context.Context, now time.Time, judge func(record, string, string) verdict) (GCStats, error) {
	var st GCStats
	qctx, cancel := p.op(ctx)
	rows, err := p.db.QueryContext(qctx, `SELECT owner, id, manifest, seal FROM codecage_snapshots WHERE expires_ns <= $1`, now.UnixNano())
	if err != nil {
		cancel()
		return st, p.fail("collecting snapshots", err)
	}
	type key struct{ owner, id string }
	var gone []key
	for rows.Next() {
		var k key
		var r record
		if err := rows.Scan(&k.owner, &k.id, &r.raw, &r.seal); err != nil {
			rows.Close()
			cancel()
			return st, p.fail("collecting snapshots", err)
		}
		switch judge(r, k.owner, k.id) {
		case expired:
			gone = append(gone, k)
		case unverified:
			st.Unverified++
		}
	}
	err = rows.Err()
	rows.Close()
	cancel()
	if err != nil {
		return st, p.fail("collecting snapshots", err)
	}
	for _, k := range gone {
		// Still expired: not a new snapshot made under the same id since.
		dctx, cancel := p.op(ctx)
		res, err := p.db.ExecContext(dctx, `DELETE FROM codecage_snapshots WHERE owner = $1 AND id = $2 AND expires_ns <= $3`, k.owner, k.id, now.UnixNano())
		cancel()
		if err != nil {
			return st, p.fail("collecting snapshots", err)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			st.Expired++
		}
	}
	return st, nil
}

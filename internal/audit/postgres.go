package audit

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// ErrUnavailable marks a store error that means the database cannot be
// reached (connection refused or lost, server shutting down), as opposed to
// one that refuses the data. The Recorder keeps events through the first
// kind and drops them on the second.
var ErrUnavailable = errors.New("audit database unavailable")

// IsPostgres reports whether SANDBOX_AUDIT_DB names a PostgreSQL database
// (a postgres:// or postgresql:// URL) rather than an SQLite file.
func IsPostgres(dsn string) bool {
	l := strings.ToLower(dsn)
	return strings.HasPrefix(l, "postgres://") || strings.HasPrefix(l, "postgresql://")
}

// postgresSchemaVersion is the schema this code writes; pgMigrations[v]
// upgrades a database from version v to v+1.
const postgresSchemaVersion = 1

var pgMigrations = [][]string{
	0: {
		`CREATE TABLE codecage_audit_events (
			id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			time_ns         BIGINT NOT NULL,
			kind            TEXT   NOT NULL,
			execution_id    TEXT   NOT NULL DEFAULT '',
			api_key         TEXT   NOT NULL DEFAULT '',
			surface         TEXT   NOT NULL DEFAULT '',
			profile         TEXT   NOT NULL DEFAULT '',
			code_hash       TEXT   NOT NULL DEFAULT '',
			code            BYTEA,
			outcome         TEXT   NOT NULL DEFAULT '',
			duration_ns     BIGINT NOT NULL DEFAULT 0,
			limit_hit       TEXT   NOT NULL DEFAULT '',
			security_events JSONB  NOT NULL DEFAULT '[]',
			detail          BYTEA,
			remote_addr     TEXT   NOT NULL DEFAULT '',
			backend         TEXT   NOT NULL DEFAULT '',
			replica         TEXT   NOT NULL DEFAULT ''
		)`,
		`CREATE INDEX codecage_audit_events_time ON codecage_audit_events (time_ns)`,
		`CREATE INDEX codecage_audit_events_execution_id ON codecage_audit_events (execution_id)`,
		`CREATE INDEX codecage_audit_events_kind ON codecage_audit_events (kind, time_ns)`,
		`CREATE INDEX codecage_audit_events_api_key ON codecage_audit_events (api_key, time_ns)`,
	},
}

// migrationLock is the advisory lock key replicas take to migrate, so that
// several starting at once apply each migration exactly once.
const migrationLock = 0x636f646563616765 // "codecage"

var postgresDialect = dialect{
	table:     "codecage_audit_events",
	numbered:  true,
	returning: true,
	securityKinds: `SELECT split_part(j.value, ':', 1) AS k, count(*)
			FROM codecage_audit_events e, jsonb_array_elements_text(e.security_events) AS j(value)
			WHERE %s AND e.security_events != '[]'::jsonb GROUP BY k`,
}

// Postgres is a Store in a PostgreSQL database, shared by every replica of
// a deployment. Events go to the table codecage_audit_events.
type Postgres struct {
	sqlDB
}

var _ Store = (*Postgres)(nil)

// OpenPostgres connects to the database at dsn (a postgres:// URL) and
// brings its schema up to date. It fails at once, naming the server, when
// the database does not answer within timeout.
func OpenPostgres(ctx context.Context, dsn string, timeout time.Duration) (*Postgres, error) {
	s, err := openPostgres(ctx, dsn, timeout)
	if err != nil {
		return nil, err
	}
	if err := s.migrate(ctx); err != nil {
		s.db.Close()
		return nil, err
	}
	if err := s.checkColumns(ctx, postgresColumns); err != nil {
		s.db.Close()
		return nil, err
	}
	return s, nil
}

// postgresColumns lists the events table's columns, in the schema the
// connection uses.
const postgresColumns = `SELECT column_name FROM information_schema.columns
	WHERE table_schema = current_schema() AND table_name = 'codecage_audit_events'`

// OpenPostgresReadOnly connects for reading, without migrating: for
// `codecage audit`, which must not change the schema under the servers.
func OpenPostgresReadOnly(ctx context.Context, dsn string, timeout time.Duration) (*Postgres, error) {
	s, err := openPostgres(ctx, dsn, timeout)
	if err != nil {
		return nil, err
	}
	v, err := s.version(ctx, s.db)
	switch {
	case err != nil:
	case v == 0:
		err = fmt.Errorf("audit: %s has no audit schema (a server creates it when it starts)", s.name)
	case v > postgresSchemaVersion:
		err = fmt.Errorf("audit: %s has schema version %d, newer than this program's %d", s.name, v, postgresSchemaVersion)
	default:
		err = s.checkColumns(ctx, postgresColumns)
	}
	if err != nil {
		s.db.Close()
		return nil, err
	}
	return s, nil
}

func openPostgres(ctx context.Context, dsn string, timeout time.Duration) (*Postgres, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgconn's message quotes the URL, password included: say less.
		return nil, fmt.Errorf("audit: the PostgreSQL URL does not parse (postgres://user:password@host:port/database?sslmode=...)")
	}
	name := fmt.Sprintf("postgres %s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
	if cfg.ConnectTimeout == 0 || cfg.ConnectTimeout > timeout {
		cfg.ConnectTimeout = timeout
	}
	db := sql.OpenDB(stdlib.GetConnector(*cfg))
	// A few connections: the recorder writes in batches from one
	// goroutine; readers (audit stats, the registry) are occasional.
	db.SetMaxOpenConns(4)
	db.SetConnMaxIdleTime(time.Minute)
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("audit: cannot reach %s within %s: %w", name, timeout, err)
	}
	s := &Postgres{sqlDB{db: db, d: postgresDialect, name: name}}
	s.readVersion(schemaVersion) // PostgreSQL's first schema has every column
	return s, nil
}

// DB is the connection pool, for other tables kept in the same database
// (the replica registry).
func (s *Postgres) DB() *sql.DB { return s.db }

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// version reads the schema version; 0 when there is no schema yet.
func (s *Postgres) version(ctx context.Context, q queryer) (int, error) {
	var exists bool
	if err := q.QueryRowContext(ctx, `SELECT to_regclass('codecage_audit_schema') IS NOT NULL`).Scan(&exists); err != nil {
		return 0, s.fail("reading the schema version", err)
	}
	if !exists {
		return 0, nil
	}
	var v int
	err := q.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM codecage_audit_schema`).Scan(&v)
	if err != nil {
		return 0, s.fail("reading the schema version", err)
	}
	return v, nil
}

// migrate brings the schema up to date in one transaction under an
// advisory lock: replicas that start together wait for the first, then
// find nothing left to do.
func (s *Postgres) migrate(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.fail("migrating "+s.name, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLock)); err != nil {
		return s.fail("migrating "+s.name, err)
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS codecage_audit_schema (version INTEGER NOT NULL)`); err != nil {
		return s.fail("migrating "+s.name, err)
	}
	v, err := s.version(ctx, tx)
	if err != nil {
		return err
	}
	err = s.sqlDB.migrate(ctx, tx, pgMigrations, v, postgresSchemaVersion, func(version int) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO codecage_audit_schema (version) VALUES ($1)`, version)
		return err
	})
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return s.fail("migrating "+s.name, err)
	}
	return nil
}

// Ping checks that the database answers.
func (s *Postgres) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return s.fail(s.name, err)
	}
	return nil
}

// unreachable reports whether err means the database could not be reached
// or went away, rather than that it refused what was sent.
func unreachable(err error) bool {
	var (
		pgErr   *pgconn.PgError
		connErr *pgconn.ConnectError
		netErr  net.Error
	)
	switch {
	case err == nil:
		return false
	case errors.As(err, &pgErr):
		// Class 08: connection exception; 57P01-03: the server is shutting
		// down or not yet accepting connections.
		return strings.HasPrefix(pgErr.Code, "08") || pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03"
	case errors.As(err, &connErr), errors.As(err, &netErr),
		errors.Is(err, driver.ErrBadConn), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, net.ErrClosed):
		return true
	}
	return pgconn.SafeToRetry(err) || pgconn.Timeout(err)
}

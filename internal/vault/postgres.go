package vault

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// pgBackend keeps secrets in codecage_secrets of the database replicas
// share, so a session on any replica finds its owner's secrets.
type pgBackend struct {
	db      *sql.DB
	name    string
	timeout time.Duration
}

// pgLockClass orders an owner's puts (MaxPerOwner) and the table's creation.
const pgLockClass = 0x73656372 // "secr"

func openPostgres(ctx context.Context, dsn string, timeout time.Duration) (*pgBackend, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgconn's message quotes the URL, password included: say less.
		return nil, fmt.Errorf("%w: the PostgreSQL URL does not parse", ErrInvalid)
	}
	if cfg.ConnectTimeout == 0 || cfg.ConnectTimeout > timeout {
		cfg.ConnectTimeout = timeout
	}
	db := sql.OpenDB(stdlib.GetConnector(*cfg))
	db.SetMaxOpenConns(4)
	db.SetConnMaxIdleTime(time.Minute)
	p := &pgBackend{db: db, name: fmt.Sprintf("postgres %s:%d/%s", cfg.Host, cfg.Port, cfg.Database), timeout: timeout}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := p.migrate(ctx); err != nil {
		db.Close()
		return nil, p.fail("creating codecage_secrets", err)
	}
	return p, nil
}

// migrate creates the table; replicas starting at once take turns.
func (p *pgBackend) migrate(ctx context.Context) error {
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1, 0)`, pgLockClass); err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS codecage_secrets (
		owner   TEXT   NOT NULL,
		name    TEXT   NOT NULL,
		created BIGINT NOT NULL,
		sealed  BYTEA  NOT NULL,
		PRIMARY KEY (owner, name)
	)`)
	if err != nil {
		return err
	}
	return tx.Commit()
}

func (p *pgBackend) fail(what string, err error) error {
	return fmt.Errorf("%w: %s on %s: %v", ErrUnavailable, what, p.name, err)
}

func (p *pgBackend) put(ctx context.Context, owner, name string, created time.Time, sealed []byte) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return p.fail("storing a secret", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, pgLockClass, owner); err != nil {
		return p.fail("storing a secret", err)
	}
	var n int
	var exists bool
	err = tx.QueryRowContext(ctx, `SELECT count(*), bool_or(name = $2) IS TRUE FROM codecage_secrets WHERE owner = $1`, owner, name).Scan(&n, &exists)
	if err != nil {
		return p.fail("storing a secret", err)
	}
	if n >= MaxPerOwner && !exists {
		return fmt.Errorf("%w: at most %d secrets an owner; delete one first", ErrLimit, MaxPerOwner)
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO codecage_secrets (owner, name, created, sealed) VALUES ($1, $2, $3, $4)
		ON CONFLICT (owner, name) DO UPDATE SET created = EXCLUDED.created, sealed = EXCLUDED.sealed`,
		owner, name, created.Unix(), sealed)
	if err != nil {
		return p.fail("storing a secret", err)
	}
	if err := tx.Commit(); err != nil {
		return p.fail("storing a secret", err)
	}
	return nil
}

func (p *pgBackend) get(ctx context.Context, owner, name string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	var sealed []byte
	err := p.db.QueryRowContext(ctx, `SELECT sealed FROM codecage_secrets WHERE owner = $1 AND name = $2`, owner, name).Scan(&sealed)
	if err == sql.ErrNoRows {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	if err != nil {
		return nil, p.fail("reading a secret", err)
	}
	return sealed, nil
}

func (p *pgBackend) list(ctx context.Context, owner string) ([]Secret, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	rows, err := p.db.QueryContext(ctx, `SELECT name, created FROM codecage_secrets WHERE owner = $1 ORDER BY name`, owner)
	if err != nil {
		return nil, p.fail("listing secrets", err)
	}
	defer rows.Close()
	out := []Secret{}
	for rows.Next() {
		var s Secret
		var created int64
		if err := rows.Scan(&s.Name, &created); err != nil {
			return nil, p.fail("listing secrets", err)
		}
		s.Created = time.Unix(created, 0).UTC()
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, p.fail("listing secrets", err)
	}
	return out, nil
}

func (p *pgBackend) remove(ctx context.Context, owner, name string) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	res, err := p.db.ExecContext(ctx, `DELETE FROM codecage_secrets WHERE owner = $1 AND name = $2`, owner, name)
	if err != nil {
		return p.fail("deleting a secret", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	return nil
}

func (p *pgBackend) close() error { return p.db.Close() }

package audit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	_ "modernc.org/sqlite" // registers the pure-Go "sqlite" driver
)

// schemaVersion is the version this code writes, kept in PRAGMA
// user_version; migrations[v] upgrades a database from version v to v+1.
const schemaVersion = 3

var migrations = [][]string{
	0: {
		`CREATE TABLE events (
			id              INTEGER PRIMARY KEY AUTOINCREMENT,
			time_ns         INTEGER NOT NULL,
			kind            TEXT    NOT NULL,
			execution_id    TEXT    NOT NULL DEFAULT '',
			api_key         TEXT    NOT NULL DEFAULT '',
			surface         TEXT    NOT NULL DEFAULT '',
			profile         TEXT    NOT NULL DEFAULT '',
			code_hash       TEXT    NOT NULL DEFAULT '',
			code            BLOB,
			outcome         TEXT    NOT NULL DEFAULT '',
			duration_ns     INTEGER NOT NULL DEFAULT 0,
			limit_hit       TEXT    NOT NULL DEFAULT '',
			security_events TEXT    NOT NULL DEFAULT '[]',
			detail          BLOB,
			remote_addr     TEXT    NOT NULL DEFAULT ''
		)`,
		`CREATE INDEX events_time ON events (time_ns)`,
		`CREATE INDEX events_execution_id ON events (execution_id)`,
		`CREATE INDEX events_kind ON events (kind, time_ns)`,
		`CREATE INDEX events_api_key ON events (api_key, time_ns)`,
	},
	// 2: the backend that ran an event's code (native, gvisor).
	1: {
		`ALTER TABLE events ADD COLUMN backend TEXT NOT NULL DEFAULT ''`,
	},
	// 3: the replica that handled the event, in a cluster.
	2: {
		`ALTER TABLE events ADD COLUMN replica TEXT NOT NULL DEFAULT ''`,
	},
}

// busyTimeoutMS bounds how long a statement waits for another connection
// (the server's writer, a concurrent `codecage audit`) to release a lock.
const busyTimeoutMS = 5000

// SQLite is a Store in an SQLite database file.
type SQLite struct {
	sqlDB
	path string
	// opened is the file as it was opened for writing (nil read-only).
	opened os.FileInfo
}

// sqliteDialect reads security events with SQLite's JSON functions.
var sqliteDialect = dialect{
	table: "events",
	securityKinds: `SELECT CASE WHEN instr(j.value, ':') > 0 THEN substr(j.value, 1, instr(j.value, ':') - 1)
			ELSE j.value END AS k, count(*)
			FROM events, json_each(CASE WHEN json_valid(events.security_events) THEN events.security_events ELSE '[]' END) AS j
			WHERE %s AND events.security_events != '[]' GROUP BY k`,
}

var _ Store = (*SQLite)(nil)

// OpenSQLite opens the audit database at path for reading and writing,
// creating it (and its parent directories, 0700) with mode 0600 when
// missing, and bringing its schema up to date.
func OpenSQLite(path string) (*SQLite, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	// Create the file ourselves: SQLite would use 0644, and the log holds
	// submitted code. The -wal and -shm files inherit this file's mode.
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	f.Close()
	// WAL lets `codecage audit` read while the server writes; FULL sync
	// because an audit record must survive a crash, and the Recorder's
	// batching keeps the number of commits (and fsyncs) low. Immediate
	// transactions take the write lock up front, so two writers wait on
	// busy_timeout instead of failing on a lock upgrade.
	dsn := fileURI(abs) + "?_pragma=busy_timeout(" + strconv.Itoa(busyTimeoutMS) + ")" +
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate"
	s, err := open(abs, dsn)
	if err != nil {
		return nil, err
	}
	if err := s.migrate(context.Background()); err != nil {
		s.db.Close()
		return nil, err
	}
	if err := s.checkColumns(context.Background(), sqliteColumns); err != nil {
		s.db.Close()
		return nil, err
	}
	// What the connections have open, to notice the path no longer
	// leading to it (see checkFile).
	if s.opened, err = os.Stat(abs); err != nil {
		s.db.Close()
		return nil, fmt.Errorf("audit: %w", err)
	}
	return s, nil
}

// sqliteColumns lists the events table's columns.
const sqliteColumns = `SELECT name FROM pragma_table_info('events')`

// OpenSQLiteReadOnly opens an existing audit database for reading only. It
// never creates the file: a missing database is an error wrapping
// fs.ErrNotExist.
func OpenSQLiteReadOnly(path string) (*SQLite, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("audit: %s is not a regular file", abs)
	}
	s, err := open(abs, fileURI(abs)+"?mode=ro&_pragma=busy_timeout("+strconv.Itoa(busyTimeoutMS)+")")
	if err != nil {
		return nil, err
	}
	v, err := s.userVersion(context.Background())
	switch {
	case err != nil:
		err = fmt.Errorf("audit: reading %s: %w", abs, err)
	case v == 0:
		err = fmt.Errorf("audit: %s has no audit schema", abs)
	case v > schemaVersion:
		err = fmt.Errorf("audit: %s has schema version %d, newer than this program's %d", abs, v, schemaVersion)
	}
	if err == nil {
		s.readVersion(v)
		err = s.checkColumns(context.Background(), sqliteColumns)
	}
	if err != nil {
		s.db.Close()
		return nil, err
	}
	return s, nil
}

func open(abs, dsn string) (*SQLite, error) {
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("audit: opening %s: %w", abs, err)
	}
	// Each connection carries its own page cache; a few are enough for one
	// writer and the occasional reader.
	db.SetMaxOpenConns(4)
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("audit: opening %s: %w", abs, err)
	}
	s := &SQLite{sqlDB: sqlDB{db: db, d: sqliteDialect, name: abs}, path: abs}
	s.readVersion(schemaVersion)
	return s, nil
}

// fileURI makes an SQLite URI of an absolute path, escaping the characters
// that would otherwise start a query, a fragment or an escape.
func fileURI(abs string) string {
	return "file:" + strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(abs)
}

// Path is the absolute path of the database file.
func (s *SQLite) Path() string { return s.path }

func (s *SQLite) userVersion(ctx context.Context) (int, error) {
	var v int
	err := s.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v)
	return v, err
}

// migrate brings the schema to schemaVersion inside one immediate
// transaction, so two processes opening a new file do not both create it.
func (s *SQLite) migrate(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("audit: opening %s: %w", s.path, err)
	}
	defer tx.Rollback()
	var v int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("audit: opening %s: %w", s.path, err)
	}
	if v == schemaVersion {
		return nil
	}
	err = s.sqlDB.migrate(ctx, tx, migrations, v, schemaVersion, func(version int) error {
		_, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", version))
		return err
	})
	if err != nil {
		return err
	}
	return tx.Commit()
}

// ErrFileGone: the database file was deleted or replaced while open.
// SQLite goes on writing to the file it has open, which no path leads to
// any more: every event would be lost when the server stops.
var ErrFileGone = errors.New("the audit database file was deleted or replaced while open")

// checkFile reports whether the path still leads to the file opened.
func (s *SQLite) checkFile() error {
	if s.opened == nil {
		return nil
	}
	fi, err := os.Stat(s.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("audit: %s: %w (it no longer exists): events written now reach no file on disk; restart the server to start a new log", s.path, ErrFileGone)
	case err != nil:
		return fmt.Errorf("audit: %s: %w", s.path, err)
	case !os.SameFile(fi, s.opened):
		return fmt.Errorf("audit: %s: %w (another file is there now): events written now reach no file on disk; restart the server to open the new one", s.path, ErrFileGone)
	}
	return nil
}

// Append writes events in one transaction, unless the database file is no
// longer where it was opened.
func (s *SQLite) Append(ctx context.Context, events []Event) error {
	if err := s.checkFile(); err != nil {
		return err
	}
	return s.sqlDB.Append(ctx, events)
}

// Ping checks that the database answers and is still the file at its
// path, for readiness probes.
func (s *SQLite) Ping(ctx context.Context) error {
	if err := s.checkFile(); err != nil {
		return err
	}
	var v int
	if err := s.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("audit: %s: %w", s.path, err)
	}
	return nil
}

package audit

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the pure-Go "sqlite" driver
)

// schemaVersion is the version this code writes, kept in PRAGMA
// user_version; migrations[v] upgrades a database from version v to v+1.
const schemaVersion = 2

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
}

// busyTimeoutMS bounds how long a statement waits for another connection
// (the server's writer, a concurrent `codecage audit`) to release a lock.
const busyTimeoutMS = 5000

const eventColumns = `id, time_ns, kind, execution_id, api_key, surface, profile, code_hash,
	code, outcome, duration_ns, limit_hit, security_events, detail, remote_addr, `

// backendColumn is the backend column, or for a database of schema 1 read
// by `codecage audit` (which may not migrate it) the value it would have.
func backendColumn(version int) string {
	if version < 2 {
		return "''"
	}
	return "backend"
}

// SQLite is a Store in an SQLite database file.
type SQLite struct {
	db      *sql.DB
	path    string
	backend string // the backend column's expression (see backendColumn)
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
	return s, nil
}

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
	if err != nil {
		s.db.Close()
		return nil, err
	}
	s.backend = backendColumn(v)
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
	return &SQLite{db: db, path: abs, backend: backendColumn(schemaVersion)}, nil
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
	if v > schemaVersion {
		return fmt.Errorf("audit: %s has schema version %d, newer than this program's %d", s.path, v, schemaVersion)
	}
	for ; v < schemaVersion; v++ {
		for _, stmt := range migrations[v] {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("audit: migrating %s to version %d: %w", s.path, v+1, err)
			}
		}
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", schemaVersion)); err != nil {
		return fmt.Errorf("audit: migrating %s: %w", s.path, err)
	}
	return tx.Commit()
}

// Append writes events in one transaction. It sets each event's ID, and its
// Time when zero, in place.
func (s *SQLite) Append(ctx context.Context, events []Event) error {
	if len(events) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("audit: append: %w", err)
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO events (time_ns, kind, execution_id, api_key, surface, profile,
		code_hash, code, outcome, duration_ns, limit_hit, security_events, detail, remote_addr, backend)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return fmt.Errorf("audit: append: %w", err)
	}
	defer stmt.Close()
	ids := make([]int64, len(events))
	now := time.Now()
	for i := range events {
		ev := &events[i]
		t := ev.Time
		if t.IsZero() {
			t = now
		}
		sec := "[]"
		if len(ev.SecurityEvents) > 0 {
			b, err := json.Marshal(ev.SecurityEvents)
			if err != nil {
				return fmt.Errorf("audit: append: %w", err)
			}
			sec = string(b)
		}
		// Code and detail come from untrusted programs: as BLOBs they keep
		// every byte, NULs and invalid UTF-8 included.
		res, err := stmt.ExecContext(ctx, t.UnixNano(), ev.Kind, ev.ExecutionID, ev.Key, ev.Surface, ev.Profile,
			ev.CodeHash, []byte(ev.Code), ev.Outcome, int64(ev.Duration), ev.Limit, sec, []byte(ev.Detail), ev.RemoteAddr, ev.Backend)
		if err != nil {
			return fmt.Errorf("audit: append: %w", err)
		}
		if ids[i], err = res.LastInsertId(); err != nil {
			return fmt.Errorf("audit: append: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("audit: append: %w", err)
	}
	// Only a committed batch reports ids, so a failed one can be retried
	// unchanged.
	for i := range events {
		events[i].ID = ids[i]
		if events[i].Time.IsZero() {
			events[i].Time = time.Unix(0, now.UnixNano()).UTC()
		}
	}
	return nil
}

// List returns the events matching q, newest first (ties by row id).
func (s *SQLite) List(ctx context.Context, q Query) ([]Event, error) {
	var where []string
	var args []any
	for _, f := range []struct{ col, val string }{
		{"kind", q.Kind}, {"api_key", q.Key}, {"surface", q.Surface}, {"outcome", q.Outcome}, {s.backend, q.Backend},
	} {
		if f.val != "" {
			where = append(where, f.col+" = ?")
			args = append(args, f.val)
		}
	}
	if !q.Since.IsZero() {
		where = append(where, "time_ns >= ?")
		args = append(args, q.Since.UnixNano())
	}
	query := "SELECT " + s.columns() + " FROM events"
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY time_ns DESC, id DESC"
	if q.Limit > 0 {
		query += " LIMIT ?"
		args = append(args, q.Limit)
	}
	return s.query(ctx, query, args...)
}

// Get returns the events of the execution ref, oldest first, or else the
// event whose row id is ref ("42" or "#42"); ErrNotFound if there is none.
func (s *SQLite) Get(ctx context.Context, ref string) ([]Event, error) {
	ref = strings.TrimSpace(ref)
	if ref == "" {
		return nil, ErrNotFound
	}
	if !strings.HasPrefix(ref, "#") {
		evs, err := s.query(ctx, "SELECT "+s.columns()+" FROM events WHERE execution_id = ? ORDER BY time_ns, id", ref)
		if err != nil || len(evs) > 0 {
			return evs, err
		}
	}
	id, err := strconv.ParseInt(strings.TrimPrefix(ref, "#"), 10, 64)
	if err != nil || id <= 0 {
		return nil, ErrNotFound
	}
	evs, err := s.query(ctx, "SELECT "+s.columns()+" FROM events WHERE id = ?", id)
	if err == nil && len(evs) == 0 {
		err = ErrNotFound
	}
	return evs, err
}

func (s *SQLite) columns() string { return eventColumns + s.backend }

func (s *SQLite) query(ctx context.Context, query string, args ...any) ([]Event, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("audit: query: %w", err)
	}
	defer rows.Close()
	evs := []Event{}
	for rows.Next() {
		var (
			ev           Event
			timeNS, dur  int64
			code, detail []byte
			sec          string
		)
		if err := rows.Scan(&ev.ID, &timeNS, &ev.Kind, &ev.ExecutionID, &ev.Key, &ev.Surface, &ev.Profile,
			&ev.CodeHash, &code, &ev.Outcome, &dur, &ev.Limit, &sec, &detail, &ev.RemoteAddr, &ev.Backend); err != nil {
			return nil, fmt.Errorf("audit: query: %w", err)
		}
		ev.Time = time.Unix(0, timeNS).UTC()
		ev.Duration = time.Duration(dur)
		ev.Code = string(code)
		ev.Detail = string(detail)
		if sec != "" && sec != "[]" {
			if err := json.Unmarshal([]byte(sec), &ev.SecurityEvents); err != nil {
				// One damaged row should not hide the rest of the log.
				ev.SecurityEvents = []string{"unreadable:" + sec}
			}
		}
		evs = append(evs, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("audit: query: %w", err)
	}
	return evs, nil
}

// Stats summarises the events at or after since (all events when zero). It
// reads in one transaction, so the figures agree with each other.
func (s *SQLite) Stats(ctx context.Context, since time.Time) (Stats, error) {
	st := Stats{Since: since}
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return st, fmt.Errorf("audit: stats: %w", err)
	}
	defer tx.Rollback()
	cond, args := "1 = 1", []any{}
	if !since.IsZero() {
		cond, args = "time_ns >= ?", []any{since.UnixNano()}
	}
	wrap := func(err error) error { return fmt.Errorf("audit: stats: %w", err) }

	var first, last sql.NullInt64
	if err := tx.QueryRowContext(ctx, "SELECT count(*), min(time_ns), max(time_ns) FROM events WHERE "+cond, args...).
		Scan(&st.Total, &first, &last); err != nil {
		return st, wrap(err)
	}
	if first.Valid {
		st.First = time.Unix(0, first.Int64).UTC()
		st.Last = time.Unix(0, last.Int64).UTC()
	}
	counts := func(query string) (map[string]int64, error) {
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		m := map[string]int64{}
		for rows.Next() {
			var k string
			var n int64
			if err := rows.Scan(&k, &n); err != nil {
				return nil, err
			}
			m[k] += n
		}
		return m, rows.Err()
	}
	for _, c := range []struct {
		dst   *map[string]int64
		query string
	}{
		{&st.ByKind, "SELECT kind, count(*) FROM events WHERE " + cond + " GROUP BY kind"},
		{&st.ByOutcome, "SELECT outcome, count(*) FROM events WHERE " + cond + " GROUP BY outcome"},
		{&st.ByKey, "SELECT api_key, count(*) FROM events WHERE " + cond + " GROUP BY api_key"},
		{&st.BySurface, "SELECT surface, count(*) FROM events WHERE " + cond + " GROUP BY surface"},
		{&st.ByBackend, "SELECT " + s.backend + " AS b, count(*) FROM events WHERE " + cond + " AND b != '' GROUP BY b"},
		{&st.LimitsHit, "SELECT limit_hit, count(*) FROM events WHERE " + cond + " AND limit_hit != '' GROUP BY limit_hit"},
		// A security event's kind is the part before its first colon.
		{&st.SecurityEvents, `SELECT CASE WHEN instr(j.value, ':') > 0 THEN substr(j.value, 1, instr(j.value, ':') - 1)
			ELSE j.value END AS k, count(*)
			FROM events, json_each(CASE WHEN json_valid(events.security_events) THEN events.security_events ELSE '[]' END) AS j
			WHERE ` + cond + ` AND events.security_events != '[]' GROUP BY k`},
	} {
		m, err := counts(c.query)
		if err != nil {
			return st, wrap(err)
		}
		*c.dst = m
	}

	execCond, execArgs := cond+" AND kind = ?", append(append([]any{}, args...), KindExecute)
	var avg float64
	var maxNS int64
	if err := tx.QueryRowContext(ctx, "SELECT count(*), coalesce(avg(duration_ns), 0), coalesce(max(duration_ns), 0) FROM events WHERE "+execCond, execArgs...).
		Scan(&st.Executions.Count, &avg, &maxNS); err != nil {
		return st, wrap(err)
	}
	st.Executions.Avg = time.Duration(avg + 0.5)
	st.Executions.Max = time.Duration(maxNS)
	percentile := func(p float64) (time.Duration, error) {
		n := st.Executions.Count
		if n == 0 {
			return 0, nil
		}
		rank := max(1, min(int64(math.Ceil(p*float64(n))), n)) // nearest rank

		var d int64
		err := tx.QueryRowContext(ctx, "SELECT duration_ns FROM events WHERE "+execCond+" ORDER BY duration_ns LIMIT 1 OFFSET ?",
			append(execArgs[:len(execArgs):len(execArgs)], rank-1)...).Scan(&d)
		return time.Duration(d), err
	}
	if st.Executions.P50, err = percentile(0.50); err != nil {
		return st, wrap(err)
	}
	if st.Executions.P95, err = percentile(0.95); err != nil {
		return st, wrap(err)
	}
	return st, nil
}

// Close closes the database.
func (s *SQLite) Close() error {
	return s.db.Close()
}

// Ping checks that the database answers, for readiness probes.
func (s *SQLite) Ping(ctx context.Context) error {
	var v int
	if err := s.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("audit: %s: %w", s.path, err)
	}
	return nil
}

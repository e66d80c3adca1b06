package audit

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// dialect is what differs between the SQL databases the log can live in.
type dialect struct {
	// table holds the events.
	table string
	// numbered placeholders ($1, $2) instead of ?.
	numbered bool
	// returning: INSERT ... RETURNING id instead of LastInsertId.
	returning bool
	// securityKinds selects (kind, 1) for each security event of the rows
	// matching %s, a condition: JSON is read differently by each database.
	securityKinds string
}

// sqlDB holds what the SQLite and PostgreSQL stores share: the event
// columns and every query over them.
type sqlDB struct {
	db   *sql.DB
	d    dialect
	name string // for errors: a path or a database address
	// The expressions of the newer columns (see readVersion).
	backend, replica string
}

const eventColumns = `id, time_ns, kind, execution_id, api_key, surface, profile, code_hash,
	code, outcome, duration_ns, limit_hit, security_events, detail, remote_addr, `

// readVersion sets the expressions of the columns added after the first
// schema: the column, or for an older database read by `codecage audit`
// (which does not migrate it) the value the column would have.
func (s *sqlDB) readVersion(version int) {
	s.backend, s.replica = "backend", "replica"
	if version < 2 {
		s.backend = "''"
	}
	if version < 3 {
		s.replica = "''"
	}
}

// bind rewrites ? placeholders for databases that number them.
func (s *sqlDB) bind(query string) string {
	if !s.d.numbered {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Append writes events in one transaction. It sets each event's ID, and its
// Time when zero, in place.
func (s *sqlDB) Append(ctx context.Context, events []Event) error {
	if len(events) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.fail("append", err)
	}
	defer tx.Rollback()
	insert := `INSERT INTO ` + s.d.table + ` (time_ns, kind, execution_id, api_key, surface, profile,
		code_hash, code, outcome, duration_ns, limit_hit, security_events, detail, remote_addr, backend, replica)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	if s.d.returning {
		insert += " RETURNING id"
	}
	stmt, err := tx.PrepareContext(ctx, s.bind(insert))
	if err != nil {
		return s.fail("append", err)
	}
	defer stmt.Close()
	ids := make([]int64, len(events))
	now := time.Now()
	text := s.text
	for i := range events {
		ev := &events[i]
		t := ev.Time
		if t.IsZero() {
			t = now
		}
		sec := "[]"
		if len(ev.SecurityEvents) > 0 {
			clean := make([]string, len(ev.SecurityEvents))
			for j, e := range ev.SecurityEvents {
				clean[j] = text(e)
			}
			b, err := json.Marshal(clean)
			if err != nil {
				return fmt.Errorf("audit: append: %w", err)
			}
			sec = string(b)
		}
		// Code and detail come from untrusted programs: as BLOBs they keep
		// every byte, NULs and invalid UTF-8 included.
		args := []any{t.UnixNano(), text(ev.Kind), text(ev.ExecutionID), text(ev.Key), text(ev.Surface), text(ev.Profile),
			text(ev.CodeHash), []byte(ev.Code), text(ev.Outcome), int64(ev.Duration), text(ev.Limit), sec, []byte(ev.Detail),
			text(ev.RemoteAddr), text(ev.Backend), text(ev.Replica)}
		if s.d.returning {
			err = stmt.QueryRowContext(ctx, args...).Scan(&ids[i])
		} else {
			var res sql.Result
			if res, err = stmt.ExecContext(ctx, args...); err == nil {
				ids[i], err = res.LastInsertId()
			}
		}
		if err != nil {
			return s.fail("append", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return s.fail("append", err)
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

// text makes a string storable in a text column: PostgreSQL refuses NUL
// and invalid UTF-8, which a key name or an import name a program made up
// may hold. SQLite keeps any bytes.
func (s *sqlDB) text(v string) string {
	if !s.d.numbered {
		return v
	}
	return strings.ReplaceAll(strings.ToValidUTF8(v, "\uFFFD"), "\x00", "\uFFFD")
}

// fail wraps a database error, marking the ones that mean the database
// cannot be reached (see ErrUnavailable).
func (s *sqlDB) fail(op string, err error) error {
	if unreachable(err) {
		return fmt.Errorf("audit: %s: %w: %w", op, ErrUnavailable, err)
	}
	return fmt.Errorf("audit: %s: %w", op, err)
}

// List returns the events matching q, newest first (ties by row id).
func (s *sqlDB) List(ctx context.Context, q Query) ([]Event, error) {
	var where []string
	var args []any
	for _, f := range []struct{ col, val string }{
		{s.replica, q.Replica}, {"kind", q.Kind}, {"api_key", q.Key}, {"surface", q.Surface}, {"outcome", q.Outcome}, {s.backend, q.Backend},
	} {
		if f.val != "" {
			where = append(where, f.col+" = ?")
			args = append(args, s.text(f.val))
		}
	}
	if !q.Since.IsZero() {
		where = append(where, "time_ns >= ?")
		args = append(args, q.Since.UnixNano())
	}
	query := "SELECT " + s.columns() + " FROM " + s.d.table
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
func (s *sqlDB) Get(ctx context.Context, ref string) ([]Event, error) {
	ref = strings.TrimSpace(ref)
	if ref == "" {
		return nil, ErrNotFound
	}
	if !strings.HasPrefix(ref, "#") {
		evs, err := s.query(ctx, "SELECT "+s.columns()+" FROM "+s.d.table+" WHERE execution_id = ? ORDER BY time_ns, id", s.text(ref))
		if err != nil || len(evs) > 0 {
			return evs, err
		}
	}
	id, err := strconv.ParseInt(strings.TrimPrefix(ref, "#"), 10, 64)
	if err != nil || id <= 0 {
		return nil, ErrNotFound
	}
	evs, err := s.query(ctx, "SELECT "+s.columns()+" FROM "+s.d.table+" WHERE id = ?", id)
	if err == nil && len(evs) == 0 {
		err = ErrNotFound
	}
	return evs, err
}

func (s *sqlDB) columns() string { return eventColumns + s.backend + ", " + s.replica }

func (s *sqlDB) query(ctx context.Context, query string, args ...any) ([]Event, error) {
	rows, err := s.db.QueryContext(ctx, s.bind(query), args...)
	if err != nil {
		return nil, s.fail("query", err)
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
			&ev.CodeHash, &code, &ev.Outcome, &dur, &ev.Limit, &sec, &detail, &ev.RemoteAddr, &ev.Backend, &ev.Replica); err != nil {
			return nil, s.fail("query", err)
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
		return nil, s.fail("query", err)
	}
	return evs, nil
}

// Stats summarises the events at or after since (all events when zero). It
// reads in one transaction, so the figures agree with each other.
func (s *sqlDB) Stats(ctx context.Context, since time.Time) (Stats, error) {
	st := Stats{Since: since}
	// Repeatable read: PostgreSQL's default would let each query see
	// the rows committed since the previous one. SQLite's read
	// transactions are snapshots already.
	opts := &sql.TxOptions{ReadOnly: true}
	if s.d.numbered {
		opts.Isolation = sql.LevelRepeatableRead
	}
	tx, err := s.db.BeginTx(ctx, opts)
	if err != nil {
		return st, s.fail("stats", err)
	}
	defer tx.Rollback()
	cond, args := "1 = 1", []any{}
	if !since.IsZero() {
		cond, args = "time_ns >= ?", []any{since.UnixNano()}
	}
	wrap := func(err error) error { return s.fail("stats", err) }
	table := s.d.table

	var first, last sql.NullInt64
	if err := tx.QueryRowContext(ctx, s.bind("SELECT count(*), min(time_ns), max(time_ns) FROM "+table+" WHERE "+cond), args...).
		Scan(&st.Total, &first, &last); err != nil {
		return st, wrap(err)
	}
	if first.Valid {
		st.First = time.Unix(0, first.Int64).UTC()
		st.Last = time.Unix(0, last.Int64).UTC()
	}
	if err := s.groupCounts(ctx, tx, cond, args, &st); err != nil {
		return st, wrap(err)
	}
	if err := s.executionStats(ctx, tx, cond, args, &st.Executions); err != nil {
		return st, wrap(err)
	}
	return st, nil
}

// groupCounts fills st's per-kind, outcome, key, surface, replica, backend,
// limit and security-event counts of the events matching cond, in tx.
func (s *sqlDB) groupCounts(ctx context.Context, tx *sql.Tx, cond string, args []any, st *Stats) error {
	table := s.d.table
	counts := func(query string) (map[string]int64, error) {
		rows, err := tx.QueryContext(ctx, s.bind(query), args...)
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
		{&st.ByKind, "SELECT kind, count(*) FROM " + table + " WHERE " + cond + " GROUP BY kind"},
		{&st.ByOutcome, "SELECT outcome, count(*) FROM " + table + " WHERE " + cond + " GROUP BY outcome"},
		{&st.ByKey, "SELECT api_key, count(*) FROM " + table + " WHERE " + cond + " GROUP BY api_key"},
		{&st.BySurface, "SELECT surface, count(*) FROM " + table + " WHERE " + cond + " GROUP BY surface"},
		{&st.ByReplica, "SELECT " + s.replica + ", count(*) FROM " + table + " WHERE " + cond + " AND " + s.replica + " != '' GROUP BY " + s.replica},
		{&st.ByBackend, "SELECT " + s.backend + ", count(*) FROM " + table + " WHERE " + cond + " AND " + s.backend + " != '' GROUP BY " + s.backend},
		{&st.LimitsHit, "SELECT limit_hit, count(*) FROM " + table + " WHERE " + cond + " AND limit_hit != '' GROUP BY limit_hit"},
		{&st.SecurityEvents, fmt.Sprintf(s.d.securityKinds, cond)},
	} {
		m, err := counts(c.query)
		if err != nil {
			return err
		}
		*c.dst = m
	}
	return nil
}

// executionStats fills ex with the count, mean, maximum and nearest-rank
// percentiles of the durations of the execute events matching cond, in tx.
func (s *sqlDB) executionStats(ctx context.Context, tx *sql.Tx, cond string, args []any, ex *DurationStats) error {
	table := s.d.table
	execCond, execArgs := cond+" AND kind = ?", append(append([]any{}, args...), KindExecute)
	var avg float64
	var maxNS int64
	if err := tx.QueryRowContext(ctx, s.bind("SELECT count(*), coalesce(avg(duration_ns), 0), coalesce(max(duration_ns), 0) FROM "+table+" WHERE "+execCond), execArgs...).
		Scan(&ex.Count, &avg, &maxNS); err != nil {
		return err
	}
	ex.Avg = time.Duration(avg + 0.5)
	ex.Max = time.Duration(maxNS)
	percentile := func(p float64) (time.Duration, error) {
		n := ex.Count
		if n == 0 {
			return 0, nil
		}
		rank := max(1, min(int64(math.Ceil(p*float64(n))), n)) // nearest rank

		var d int64
		err := tx.QueryRowContext(ctx, s.bind("SELECT duration_ns FROM "+table+" WHERE "+execCond+" ORDER BY duration_ns LIMIT 1 OFFSET ?"),
			append(execArgs[:len(execArgs):len(execArgs)], rank-1)...).Scan(&d)
		return time.Duration(d), err
	}
	var err error
	if ex.P50, err = percentile(0.50); err != nil {
		return err
	}
	ex.P95, err = percentile(0.95)
	return err
}

// migrate applies steps[v] for each version v from from up to to, in tx,
// calling done(v+1) after each; both databases keep their schema version
// their own way.
func (s *sqlDB) migrate(ctx context.Context, tx *sql.Tx, steps [][]string, from, to int, done func(version int) error) error {
	if from > to {
		return fmt.Errorf("audit: %s has schema version %d, newer than this program's %d", s.name, from, to)
	}
	for v := from; v < to; v++ {
		for _, stmt := range steps[v] {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return s.fail(fmt.Sprintf("migrating %s to version %d", s.name, v+1), err)
			}
		}
		if err := done(v + 1); err != nil {
			return s.fail("migrating "+s.name, err)
		}
	}
	return nil
}

// Name says which database this is: a path, or a PostgreSQL server and
// database (never its password).
func (s *sqlDB) Name() string { return s.name }

// Close closes the database.
func (s *sqlDB) Close() error {
	return s.db.Close()
}

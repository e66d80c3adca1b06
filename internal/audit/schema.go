package audit

import (
	"context"
	"fmt"
	"strings"
)

// checkColumns refuses a database whose events table lacks a column this
// program reads or writes: its schema version may say it is up to date
// while the table is another program's (or damaged), and every event
// written to it would fail, silently, once the server is serving.
// columnsQuery lists the table's column names.
func (s *sqlDB) checkColumns(ctx context.Context, columnsQuery string) error {
	rows, err := s.db.QueryContext(ctx, columnsQuery)
	if err != nil {
		return s.fail("reading the schema of "+s.name, err)
	}
	defer rows.Close()
	have := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return s.fail("reading the schema of "+s.name, err)
		}
		have[strings.ToLower(name)] = true
	}
	if err := rows.Err(); err != nil {
		return s.fail("reading the schema of "+s.name, err)
	}
	var missing []string
	for _, c := range s.requiredColumns() {
		if !have[c] {
			missing = append(missing, c)
		}
	}
	switch {
	case len(have) == 0:
		return fmt.Errorf("audit: %s has no table %s although its schema version says it has: not an audit log of this program (move it aside, or point SANDBOX_AUDIT_DB elsewhere)", s.name, s.d.table)
	case len(missing) > 0:
		return fmt.Errorf("audit: %s: table %s lacks the columns %s that its schema version promises: not an audit log of this program (move it aside, or point SANDBOX_AUDIT_DB elsewhere)", s.name, s.d.table, strings.Join(missing, ", "))
	}
	return nil
}

// requiredColumns are the columns the queries name, at the schema version
// readVersion set.
func (s *sqlDB) requiredColumns() []string {
	var cols []string
	for _, c := range strings.Split(eventColumns, ",") {
		if c = strings.TrimSpace(c); c != "" {
			cols = append(cols, c)
		}
	}
	for _, c := range []string{s.backend, s.replica} {
		if !strings.HasPrefix(c, "'") { // a constant stands for a column an older schema lacks
			cols = append(cols, c)
		}
	}
	return cols
}

// Package bounded keeps what sandboxed code controls from taking unbounded
// room where the server stores or logs it: String caps one value, Quota
// caps how many of one kind of item a run leaves behind, Quote quotes a
// client's input for an error message.
package bounded

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"unicode/utf8"
)

// String returns s when it is at most max bytes; otherwise its start, an
// ellipsis and s's length, "abc… (4194304 bytes)", in at most max bytes
// (the marker alone when max is smaller than it). The cut falls between
// UTF-8 characters, so valid text stays valid.
func String(s string, max int) string {
	if len(s) <= max {
		return s
	}
	marker := "… (" + strconv.Itoa(len(s)) + " bytes)"
	keep := max - len(marker)
	if keep <= 0 {
		return marker
	}
	// Back up over at most three continuation bytes to a character start.
	for i := 0; i < utf8.UTFMax-1 && keep > 0 && !utf8.RuneStart(s[keep]); i++ {
		keep--
	}
	return s[:keep] + marker
}

// Quota lets the first Max items of one kind through and counts the rest,
// so that what code can repeat at will (refused calls, refused hosts)
// leaves at most Max records and one summary. Safe for concurrent use.
type Quota struct {
	max  int64
	seen atomic.Int64
}

// NewQuota returns a quota of max items (none when max <= 0).
func NewQuota(max int) *Quota { return &Quota{max: int64(max)} }

// Take counts an item and reports whether it is within the quota.
func (q *Quota) Take() bool { return q.seen.Add(1) <= q.max }

// More is how many items Take turned away.
func (q *Quota) More() int64 { return max(0, q.seen.Load()-max(q.max, 0)) }

// Summary says how many items were turned away, "and 12 more refused
// calls" for what "refused calls"; "" when none were.
func (q *Quota) Summary(what string) string {
	n := q.More()
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("and %d more %s", n, what)
}

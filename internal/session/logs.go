package session

import (
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/codecage/codecage/internal/bounded"
)

// A session's log is what a VM's system log would say about it: its
// lifecycle, each command's start and end, each request's outcome, and
// what its interpreter wrote to stderr. It is a bounded ring kept in
// memory with the session (E2B's sandbox logs, GET /sessions/{id}/logs):
// the oldest entries go first, and every string in it is capped, since
// the code in the sandbox chooses most of them.

// Log levels, E2B's LogLevel, least severe first.
const (
	LevelDebug = "debug"
	LevelInfo  = "info"
	LevelWarn  = "warn"
	LevelError = "error"
)

var levelRank = map[string]int{LevelDebug: 0, LevelInfo: 1, LevelWarn: 2, LevelError: 3}

// ValidLevel reports whether l is one of the log levels.
func ValidLevel(l string) bool { _, ok := levelRank[l]; return ok }

// Bounds of a session's log: at most MaxLogEntries entries of at most
// about MaxLogMessage + MaxLogFields*(MaxLogField+32) bytes each, some
// 400 KiB for a session that fills it with the longest.
const (
	MaxLogEntries = 256
	MaxLogMessage = 1024
	MaxLogFields  = 8
	MaxLogField   = 256
	// MaxLogRead is the most entries one read returns.
	MaxLogRead = 1000
)

// LogEntry is one entry of a session's log.
type LogEntry struct {
	Time    time.Time         `json:"timestamp"`
	Level   string            `json:"level"`
	Message string            `json:"message"`
	Fields  map[string]string `json:"fields,omitempty"`
}

// LogQuery selects entries of a session's log.
type LogQuery struct {
	// Cursor is where the read starts (zero: the oldest entry, or the
	// newest when Backward): entries at or after it, or at or before it
	// when Backward.
	Cursor time.Time `json:"cursor,omitzero"`
	// Backward reads from the newest down.
	Backward bool `json:"backward,omitempty"`
	// Limit is the most entries returned (0: MaxLogRead; more is cut to it).
	Limit int `json:"limit,omitempty"`
	// MinLevel drops entries below that level ("": none).
	MinLevel string `json:"min_level,omitempty"`
	// Search keeps the entries whose message holds it (case-sensitive).
	Search string `json:"search,omitempty"`
}

// sessionLog is a session's log. Its lock is a leaf: taken under any of
// the session's locks or none, it takes none.
type sessionLog struct {
	mu      sync.Mutex
	entries []LogEntry // a ring of MaxLogEntries once full
	next    int        // where the next entry goes, once full
}

// add appends an entry, capping what it holds; the oldest goes when the
// log is full.
func (l *sessionLog) add(level, msg string, fields map[string]string) {
	l.addAt(time.Now(), level, msg, fields)
}

// addAt is add of an entry of time at.
func (l *sessionLog) addAt(at time.Time, level, msg string, fields map[string]string) {
	e := LogEntry{Time: at.UTC(), Level: level, Message: capText(msg, MaxLogMessage)}
	if len(fields) > 0 {
		e.Fields = make(map[string]string, min(len(fields), MaxLogFields))
		keys := make([]string, 0, len(fields))
		for k := range fields {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys[:min(len(keys), MaxLogFields)] {
			e.Fields[capText(k, 64)] = capText(fields[k], MaxLogField)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.entries) < MaxLogEntries {
		l.entries = append(l.entries, e)
		return
	}
	l.entries[l.next] = e
	l.next = (l.next + 1) % MaxLogEntries
}

// restore puts a parked session's entries back, oldest first, before what
// it has logged since it started again; each is capped again, as it comes
// from the store.
func (l *sessionLog) restore(saved []LogEntry) {
	l.mu.Lock()
	since := append(append([]LogEntry(nil), l.entries[l.next:]...), l.entries[:l.next]...)
	l.entries, l.next = nil, 0
	l.mu.Unlock()
	for _, e := range append(saved[max(0, len(saved)-MaxLogEntries):], since...) {
		if !ValidLevel(e.Level) {
			e.Level = LevelInfo
		}
		l.addAt(e.Time, e.Level, e.Message, e.Fields)
	}
}

// read returns the entries q selects, oldest first (newest first when
// q.Backward).
func (l *sessionLog) read(q LogQuery) []LogEntry {
	limit := q.Limit
	if limit <= 0 || limit > MaxLogRead {
		limit = MaxLogRead
	}
	l.mu.Lock()
	ordered := append(append([]LogEntry(nil), l.entries[l.next:]...), l.entries[:l.next]...)
	l.mu.Unlock()
	if q.Backward {
		slices.Reverse(ordered)
	}
	out := []LogEntry{}
	for _, e := range ordered {
		switch {
		case len(out) == limit:
			return out
		case !q.Cursor.IsZero() && !q.Backward && e.Time.Before(q.Cursor),
			!q.Cursor.IsZero() && q.Backward && e.Time.After(q.Cursor),
			q.MinLevel != "" && levelRank[e.Level] < levelRank[q.MinLevel],
			q.Search != "" && !strings.Contains(e.Message, q.Search):
			continue
		}
		out = append(out, e)
	}
	return out
}

// capText is s capped and made valid UTF-8 (the code may write any
// bytes): cut first, so that a huge value costs no more than its start.
func capText(s string, n int) string {
	s = bounded.String(s, n)
	if !utf8.ValidString(s) {
		s = bounded.String(strings.ToValidUTF8(s, "\uFFFD"), n)
	}
	return s
}

// Log appends an entry to the session's log.
func (se *Session) Log(level, msg string, fields map[string]string) { se.log.add(level, msg, fields) }

// Logs reads the session's log.
func (se *Session) Logs(q LogQuery) []LogEntry { return se.log.read(q) }

// Log appends an entry to the log of session id, when this table holds it
// for owner; else nothing (a session of another replica logs there).
func (t *Table) Log(id, owner, level, msg string, fields map[string]string) {
	if se, err := t.Get(id, owner); err == nil {
		se.Log(level, msg, fields)
	}
}

// LogStderr appends what a run's interpreter wrote to stderr, if anything.
func (se *Session) LogStderr(stderr string) {
	if strings.TrimSpace(stderr) != "" {
		se.Log(LevelWarn, "stderr: "+stderr, nil)
	}
}

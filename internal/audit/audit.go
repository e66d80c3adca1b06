// Package audit keeps a durable log of every sandbox event: who ran what,
// through which surface, and how it ended. The default store is an embedded
// SQLite database; the server writes to it through a Recorder so that audit
// I/O never holds up an execution.
package audit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"time"
)

// Event kinds.
const (
	KindExecute      = "execute"
	KindValidate     = "validate"
	KindCommand      = "command"
	KindInstall      = "install"
	KindSession      = "session"
	KindFile         = "file"
	KindDenied       = "denied"
	KindAuditDropped = "audit_dropped"
)

// Event is one audited action.
type Event struct {
	ID             int64         `json:"id"` // row id, set by the store
	Time           time.Time     `json:"time"`
	Kind           string        `json:"kind"`                   // one of the Kind constants
	ExecutionID    string        `json:"execution_id,omitempty"` // "" when none
	Key            string        `json:"key,omitempty"`          // API key name; "" = no keys configured / local
	Surface        string        `json:"surface,omitempty"`      // "rest", "mcp", "mcp-stdio", "cli"
	Profile        string        `json:"profile,omitempty"`
	CodeHash       string        `json:"code_hash,omitempty"` // sha256 hex of the code or command
	Code           string        `json:"code,omitempty"`      // empty when the operator turned code logging off
	Outcome        string        `json:"outcome,omitempty"`   // "success", "error", "timeout", "memory", "denied", ...
	Duration       time.Duration `json:"duration_ns"`
	Limit          string        `json:"limit,omitempty"` // the limit hit: "timeout", "memory", "cpu", "output"
	SecurityEvents []string      `json:"security_events,omitempty"`
	Detail         string        `json:"detail,omitempty"` // error message, denial reason, package name, HTTP status
	RemoteAddr     string        `json:"remote_addr,omitempty"`
	Backend        string        `json:"backend,omitempty"` // what ran the code: "native" or "gvisor"; "" when nothing ran
	Replica        string        `json:"replica,omitempty"` // the replica that handled it, in a cluster; "" for a single server
}

// HashCode returns the hex SHA-256 of code, so identical submissions can be
// correlated even when the code itself is not logged.
func HashCode(code string) string {
	sum := sha256.Sum256([]byte(code))
	return hex.EncodeToString(sum[:])
}

// ErrNotFound is returned by Store.Get when no event matches the reference.
var ErrNotFound = errors.New("audit: no such event")

// Store persists events. Implementations are safe for concurrent use.
type Store interface {
	// Append writes the events in one transaction: all or none.
	Append(ctx context.Context, events []Event) error
	// List returns the events matching q, newest first.
	List(ctx context.Context, q Query) ([]Event, error)
	// Get returns the events of an execution id, or the event with a
	// numeric row id ("42" or "#42"), oldest first; ErrNotFound if none.
	Get(ctx context.Context, ref string) ([]Event, error)
	// Stats summarises the events at or after since (all when zero).
	Stats(ctx context.Context, since time.Time) (Stats, error)
	// Name says which database this is, for messages: a path, or a
	// PostgreSQL server (never a password).
	Name() string
	// Close releases the store.
	Close() error
}

// Query selects events for Store.List. Empty fields do not filter.
type Query struct {
	Limit   int       `json:"limit,omitempty"` // at most this many; <= 0 means no limit
	Kind    string    `json:"kind,omitempty"`
	Key     string    `json:"key,omitempty"`
	Surface string    `json:"surface,omitempty"`
	Outcome string    `json:"outcome,omitempty"`
	Backend string    `json:"backend,omitempty"`
	Replica string    `json:"replica,omitempty"`
	Since   time.Time `json:"since,omitzero"` // events at or after this time
}

// Stats summarises the audit log over a period.
type Stats struct {
	Since          time.Time        `json:"since,omitzero"` // the period's start; zero = all time
	Total          int64            `json:"total"`
	First          time.Time        `json:"first,omitzero"` // oldest event in the period
	Last           time.Time        `json:"last,omitzero"`  // newest event in the period
	ByKind         map[string]int64 `json:"by_kind"`
	ByOutcome      map[string]int64 `json:"by_outcome"`
	ByKey          map[string]int64 `json:"by_key"` // "" = no key (local or keys not configured)
	BySurface      map[string]int64 `json:"by_surface"`
	ByBackend      map[string]int64 `json:"by_backend"`      // events that ran code, by the backend that ran it
	ByReplica      map[string]int64 `json:"by_replica"`      // events by the replica that handled them (a cluster's)
	LimitsHit      map[string]int64 `json:"limits_hit"`      // limit name -> events that hit it
	SecurityEvents map[string]int64 `json:"security_events"` // kind ("import_denied" of "import_denied:socket") -> count
	Executions     DurationStats    `json:"executions"`      // durations of "execute" events
}

// DurationStats describes a set of durations. Percentiles use the
// nearest-rank method, so they are always durations that occurred.
type DurationStats struct {
	Count int64         `json:"count"`
	Avg   time.Duration `json:"avg_ns"`
	P50   time.Duration `json:"p50_ns"`
	P95   time.Duration `json:"p95_ns"`
	Max   time.Duration `json:"max_ns"`
}

// DefaultPath is where the audit database lives unless configured
// (SANDBOX_AUDIT_DB, read by the config loader):
// $XDG_STATE_HOME/codecage/audit.db, else
// ~/.local/state/codecage/audit.db, else /var/lib/codecage/audit.db when
// there is no home directory (a system service).
func DefaultPath() string {
	// The XDG spec says relative values are invalid and must be ignored.
	if d := os.Getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "codecage", "audit.db")
	}
	if home, err := os.UserHomeDir(); err == nil && home != "" {
		return filepath.Join(home, ".local", "state", "codecage", "audit.db")
	}
	return "/var/lib/codecage/audit.db"
}

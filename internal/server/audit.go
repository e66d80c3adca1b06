package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/audit"
	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/service"
)

// auditObserver writes the service's events to the audit log.
type auditObserver struct {
	rec     *audit.Recorder
	code    bool   // SANDBOX_AUDIT_CODE: keep the code, not only its hash
	replica string // this replica's name, in a cluster
}

func (a auditObserver) Observe(ev service.Event) {
	kind := ev.Kind
	detail := ev.Detail
	if ev.Action != "" {
		detail = ev.Action + ": " + detail
	}
	e := audit.Event{
		Time: ev.Time, Kind: kind, ExecutionID: ev.ExecutionID, Key: ev.Caller.Key, Surface: ev.Caller.Surface,
		Profile: ev.Profile, Outcome: ev.Outcome, Duration: ev.Duration, Limit: ev.Limit,
		SecurityEvents: ev.SecurityEvents, Detail: detail, RemoteAddr: ev.Caller.RemoteAddr, Backend: ev.Backend, Replica: a.replica,
	}
	if e.Surface == "" {
		e.Surface = service.SurfaceCLI
	}
	if ev.Code != "" {
		e.CodeHash = service.HashCode(ev.Code)
		if a.code {
			e.Code = ev.Code
		}
	}
	a.rec.Record(e)
}

// logObserver logs the executions of surfaces that have no request log
// of their own (MCP), one line each with its execution id.
type logObserver struct{ log *slog.Logger }

func (l logObserver) Observe(ev service.Event) {
	if ev.Caller.Surface == service.SurfaceREST {
		return // the request log line carries the execution id
	}
	attrs := []slog.Attr{slog.String("kind", ev.Kind), slog.String("outcome", ev.Outcome),
		slog.Float64("duration_ms", float64(ev.Duration.Microseconds())/1000), slog.String("surface", ev.Caller.Surface)}
	if ev.ExecutionID != "" {
		attrs = append(attrs, slog.String("execution_id", ev.ExecutionID))
	}
	if ev.Action != "" {
		attrs = append(attrs, slog.String("action", ev.Action))
	}
	if ev.Caller.Key != "" {
		attrs = append(attrs, slog.String("key", ev.Caller.Key))
	}
	if ev.Limit != "" {
		attrs = append(attrs, slog.String("limit", ev.Limit))
	}
	l.log.LogAttrs(context.Background(), slog.LevelInfo, "event", attrs...)
}

// auditStore is an audit store the server can probe.
type auditStore interface {
	audit.Store
	Ping(ctx context.Context) error
}

// auditConnectWait bounds how long serve waits for PostgreSQL at startup:
// long enough for a database starting beside it (a pod of the same
// deployment), short enough that a wrong URL fails visibly.
const auditConnectWait = 20 * time.Second

// openAuditLog opens the audit log and its asynchronous recorder: an
// SQLite file, or PostgreSQL when SANDBOX_AUDIT_DB is a postgres:// URL.
// where names it for the log, without a password.
func openAuditLog(cfg config.Config, log *slog.Logger) (rec *audit.Recorder, store auditStore, where string, err error) {
	path := cfg.AuditDB
	if path == "" {
		path = audit.DefaultPath()
	}
	if audit.IsPostgres(path) {
		pg, err := openPostgresAudit(path, log)
		if err != nil {
			return nil, nil, "", fmt.Errorf("audit log (SANDBOX_AUDIT_DB): %w", err)
		}
		return audit.NewRecorder(pg, cfg.AuditBuffer, log).LimitCode(cfg.MaxCodeSize), pg, pg.Name(), nil
	}
	s, err := audit.OpenSQLite(path)
	if err != nil {
		return nil, nil, path, fmt.Errorf("audit log %s: %w (SANDBOX_AUDIT_DB sets where it goes)", path, err)
	}
	return audit.NewRecorder(s, cfg.AuditBuffer, log).LimitCode(cfg.MaxCodeSize), s, path, nil
}

// openPostgresAudit connects, retrying for auditConnectWait while the
// database does not answer yet.
func openPostgresAudit(dsn string, log *slog.Logger) (*audit.Postgres, error) {
	deadline := time.Now().Add(auditConnectWait)
	for {
		pg, err := audit.OpenPostgres(context.Background(), dsn, 5*time.Second)
		if err == nil || !errors.Is(err, audit.ErrUnavailable) && !strings.Contains(err.Error(), "cannot reach") || time.Now().After(deadline) {
			return pg, err
		}
		log.Warn("audit log: PostgreSQL does not answer yet; retrying", "err", err)
		time.Sleep(time.Second)
	}
}

// closeAudit flushes the recorder and closes the store.
func closeAudit(rec *audit.Recorder, store audit.Store, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 30e9)
	defer cancel()
	if err := rec.Close(ctx); err != nil {
		log.Error("audit log: flush failed", "err", err, "dropped", rec.Dropped())
	}
	if err := store.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "codecage: audit log:", err)
	}
}

// auditReadiness is the audit log's readiness check. It fails while the
// log is not being kept: the last write was refused and its events lost
// (a full disk, a table that is not the log's), or, for SQLite, the file
// cannot be read or is no longer at its path (deleted while open). A
// shared PostgreSQL that is merely down does not fail it: every replica
// would leave the Service at once, while runs can go on with their events
// held in the recorder's buffer (and, past it, counted as dropped).
func auditReadiness(ctx context.Context, store auditStore, rec *audit.Recorder) string {
	if _, shared := store.(*audit.Postgres); !shared {
		if err := store.Ping(ctx); err != nil {
			return errText(err)
		}
	}
	return errText(rec.Failing())
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

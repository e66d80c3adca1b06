package service

import (
	"context"
	"errors"

	"github.com/codecage/codecage/internal/service/check"
	"github.com/codecage/codecage/internal/service/event"
	"github.com/codecage/codecage/internal/session"
)

// A session's log (session/logs.go) is written by the session table (its
// lifecycle), by the envelope (every request about the session that is
// not a read: its outcome, and a command's start), and by a run (what its
// interpreter wrote to stderr). SessionLogs reads it, forwarded to the
// replica that holds the session like every session operation. A parked
// session's log goes into the store with it (persist: blob "log") and comes
// back with it; read while it is parked, it is empty.

type (
	// LogEntry is one entry of a session's log.
	LogEntry = session.LogEntry
	// LogQuery selects entries of a session's log.
	LogQuery = session.LogQuery
)

const opSessionLogs = "session_logs"

// SessionLogs reads session id's log.
func (s *Service) SessionLogs(ctx context.Context, id, owner string, q LogQuery) ([]LogEntry, error) {
	return do(ctx, s, opSessionLogs, call[[]LogEntry]{
		session: id, owner: owner, args: q,
		check: func() error { return check.LogQuery(q) },
		run: func(ctx context.Context) ([]LogEntry, error) {
			se, err := s.session(id, owner)
			if errors.Is(err, ErrSessionNotFound) {
				if _, parked, perr := s.parked(ctx, owner, id); parked || perr != nil {
					return []LogEntry{}, perr
				}
			}
			if err != nil {
				return nil, err
			}
			return se.Logs(q), nil
		},
	})
}

func logOps() map[string]op {
	return map[string]op{
		opSessionLogs: {admit: admitNone, kind: EventSession, action: "logs", quiet: true, parked: parkLeave, peer: peerOp[LogQuery, []LogEntry]{do: serveSessionLogs}},
	}
}

func serveSessionLogs(ctx context.Context, s *Service, call PeerCall, q LogQuery, _ outputFunc) ([]LogEntry, error) {
	return s.SessionLogs(ctx, call.SessionID, call.Owner, q)
}

// logStarted writes a command's start to its session's log.
func (s *Service) logStarted(o op, id, owner, code string) {
	if o.kind == EventCommand && !o.quiet && id != "" {
		s.sessions.Log(id, owner, session.LevelInfo, "command started", map[string]string{"command": code})
	}
}

// logOutcome writes a request's outcome, its event, to its session's log
// (event.LogLine).
func (s *Service) logOutcome(o op, id, owner string, ev Event) {
	if o.quiet || id == "" {
		return
	}
	if level, msg, fields, ok := event.LogLine(ev, id); ok {
		s.sessions.Log(id, owner, level, msg, fields)
	}
}

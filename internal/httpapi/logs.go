package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/codecage/codecage/internal/service"
)

// SessionLogsInput is GET /sessions/{id}/logs.
type SessionLogsInput struct {
	ID        string `path:"id" doc:"The session's id."`
	Cursor    int64  `query:"cursor" minimum:"0" doc:"Where the read starts, in milliseconds since the Unix epoch: entries at or after it (at or before it, backward). Absent: the oldest (the newest, backward)."`
	Direction string `query:"direction" enum:"forward,backward" default:"forward" doc:"forward: oldest first; backward: newest first."`
	Level     string `query:"level" enum:"debug,info,warn,error" doc:"The least severe level returned."`
	Search    string `query:"search" maxLength:"1024" doc:"Only entries whose message holds this text (case-sensitive)."`
	Limit     int    `query:"limit" minimum:"0" maximum:"1000" default:"1000" doc:"The most entries returned."`
}

// SessionLogsOutput is GET /sessions/{id}/logs.
type SessionLogsOutput struct {
	Body struct {
		Logs []service.LogEntry `json:"logs" doc:"The entries, in the order asked."`
	}
}

// logRoutes registers a session's log.
func (s *Server) logRoutes() {
	huma.Register(s.api, huma.Operation{
		OperationID: "session-logs", Method: http.MethodGet, Path: "/sessions/{id}/logs", Tags: []string{"Sessions"},
		Summary: "Read a session's log",
		Description: "What happened to the session, as a machine's system log would say it: its lifecycle (started, paused, resumed, restarted), each command's start and end, every request's outcome, and what its interpreter wrote to stderr. " +
			"The log is a ring of the newest entries, kept in memory with the session, each string capped; a session parked in the snapshot store keeps it there and takes it back when it returns (while it is parked, the list is empty).",
		Errors: []int{400, 401, 404, 429},
	}, func(ctx context.Context, in *SessionLogsInput) (*SessionLogsOutput, error) {
		q := service.LogQuery{Backward: in.Direction == "backward", Limit: in.Limit, MinLevel: in.Level, Search: in.Search}
		if in.Cursor > 0 {
			q.Cursor = time.UnixMilli(in.Cursor)
		}
		logs, err := s.svc.SessionLogs(ctx, in.ID, owner(ctx), q)
		if err != nil {
			return nil, problemFor(err)
		}
		out := &SessionLogsOutput{}
		out.Body.Logs = logs
		return out, nil
	})
}

package e2b

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/e2b/wire"
	"github.com/codecage/codecage/internal/service"
)

// A sandbox's logs are its session's log (service.SessionLogs): v1's
// GET /sandboxes/{id}/logs?start=&limit= answers {logs: [{timestamp, line}],
// logEntries}, each line a JSON record as envd writes (e2b sandbox logs
// parses it); v2's GET /v2/sandboxes/{id}/logs?cursor=&limit=&direction=
// &level=&search= answers {logs: [{timestamp, level, message, fields}]}.

// sandboxLogs answers both versions.
func (s *Server) sandboxLogs(w http.ResponseWriter, r *http.Request) {
	v1 := !strings.HasPrefix(r.URL.Path, "/v2/")
	q, err := logQuery(r, v1)
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	info, ok := s.session(w, r)
	if !ok {
		return
	}
	logs, err := s.svc.SessionLogs(r.Context(), info.ID, ownerOf(r.Context()), q)
	if err != nil {
		s.serviceError(w, err)
		return
	}
	entries := make([]wire.SandboxLogEntry, len(logs))
	lines := make([]wire.SandboxLog, len(logs))
	for i, e := range logs {
		entries[i] = wire.SandboxLogEntry{Timestamp: e.Time, Level: e.Level, Message: e.Message, Fields: e.Fields}
		record := map[string]string{}
		maps.Copy(record, e.Fields)
		record["level"], record["logger"], record["message"] = e.Level, "session", e.Message
		line, _ := json.Marshal(record)
		lines[i] = wire.SandboxLog{Timestamp: e.Time, Line: string(line)}
	}
	if v1 {
		writeJSON(w, http.StatusOK, wire.SandboxLogs{Logs: lines, LogEntries: entries})
		return
	}
	writeJSON(w, http.StatusOK, wire.SandboxLogsV2{Logs: entries})
}

// logQuery reads a logs request's query: v1's start and limit, v2's
// cursor, limit, direction, level and search.
func logQuery(r *http.Request, v1 bool) (service.LogQuery, error) {
	p := r.URL.Query()
	var q service.LogQuery
	cursor := "cursor"
	if v1 {
		cursor = "start"
	}
	if v := p.Get(cursor); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms < 0 {
			return q, badParam(cursor, "a time in milliseconds since the Unix epoch")
		}
		q.Cursor = time.UnixMilli(ms)
	}
	if v := p.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1000 {
			return q, badParam("limit", "a number of entries, 0 to 1000")
		}
		q.Limit = n
	}
	if v1 {
		return q, nil
	}
	switch p.Get("direction") {
	case "", "forward":
	case "backward":
		q.Backward = true
	default:
		return q, badParam("direction", "forward or backward")
	}
	q.MinLevel, q.Search = p.Get("level"), p.Get("search")
	return q, nil
}

func badParam(name, want string) error { return fmt.Errorf("%s must be %s", name, want) }
